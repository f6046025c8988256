<?php
// consume.php: the dataset read by PHP's Gearman extension (php-gearman),
// plain Gearman client code that knows nothing of dsjob: every shard is a
// task of one run, the rows come in through the data callback (WORK_DATA)
// and each shard's summary through the complete callback; a shard that
// fails is run again (3 attempts). Each shard's rows are checked against
// its summary (count, and Adler-32 with hash('adler32')). Prints what
// dataset-consumer prints (SHARD<TAB>ROW lines, "# shard S ok N ADLER32"
// or "# shard S bad: WHY"); exit 0 when every shard matched.
//   usage: php consume.php HOST:PORT NAME SHARDS ROWS SEED
if ($argc != 6) {
    fwrite(STDERR, "usage: php consume.php HOST:PORT NAME SHARDS ROWS SEED\n");
    exit(2);
}
[$host, $port] = explode(':', $argv[1]);
[$name, $shards, $rows, $seed] = [$argv[2], (int)$argv[3], (int)$argv[4], (int)$argv[5]];

$client = new GearmanClient();
$client->addServer($host, (int)$port);
$data = array_fill(0, $shards, '');
$summary = [];
$failed = [];
$client->setDataCallback(function (GearmanTask $t, $s) use (&$data) {
    $data[$s] .= $t->data();
});
$client->setCompleteCallback(function (GearmanTask $t, $s) use (&$summary) {
    $summary[$s] = $t->data();
});
$client->setFailCallback(function (GearmanTask $t, $s) use (&$failed) {
    $failed[$s] = true;
});

$todo = range(0, $shards - 1);
for ($attempt = 1; $attempt <= 3 && $todo; $attempt++) {
    $failed = [];
    foreach ($todo as $s) {
        $data[$s] = '';
        $spec = json_encode(['dataset' => $name, 'shard' => $s, 'shards' => $shards,
                             'seed' => $seed, 'rows' => $rows]);
        $client->addTask('dataset.shard', $spec, $s, "$name/$seed/$rows/{$s}of$shards");
    }
    if (!$client->runTasks()) {
        fwrite(STDERR, "consume.php: " . $client->error() . "\n");
    }
    $todo = array_keys($failed);
    foreach ($todo as $s) {
        fwrite(STDERR, "consume.php: shard $s, attempt $attempt failed\n");
    }
}

$bad = 0;
for ($s = 0; $s < $shards; $s++) {
    foreach (explode("\n", rtrim($data[$s], "\n")) as $row) {
        if ($row !== '') {
            echo "$s\t$row\n";
        }
    }
    $sum = isset($summary[$s]) ? json_decode($summary[$s], true) : null;
    $count = substr_count($data[$s], "\n");
    $adler = hash('adler32', $data[$s]);
    if (!is_array($sum)) {
        echo "# shard $s bad: no summary\n";
        $bad = 1;
    } elseif ($sum['count'] !== $count || $sum['adler32'] !== $adler) {
        echo "# shard $s bad: got $count rows with adler32 $adler, the producer says "
            . "{$sum['count']} with {$sum['adler32']}\n";
        $bad = 1;
    } else {
        echo "# shard $s ok $count $adler\n";
    }
}
exit($bad);
