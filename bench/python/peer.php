<?php
// php-gearman's figures for bench/python/run, of the same shapes as cref:
//   php peer.php bg SERVER N      N background submits (addTaskBackground, one runTasks)
//   php peer.php fg SERVER N      N foreground round trips (doNormal)
//   php peer.php inflight SERVER N K   N foreground jobs, K in flight at once
//                                 (addTask, runTasks: task sets of K, as cref's)
//   php peer.php worker SERVER 1  a no-op worker for "noop" until killed
// Prints the seconds of the measured part.
[$_, $mode, $server, $n] = $argv;
$k = (int)($argv[4] ?? 1);
[$host, $port] = explode(':', $server);
if ($mode === 'worker') {
    $w = new GearmanWorker();
    $w->addServer($host, (int)$port);
    $w->addFunction('noop', function ($job) { return ''; });
    while ($w->work()) {
    }
    exit(0);
}
$c = new GearmanClient();
$c->addServer($host, (int)$port);
$t0 = microtime(true);
if ($mode === 'bg') {
    for ($i = 0; $i < $n; $i++) {
        $c->addTaskBackground('noop', 'x');
    }
    if (!$c->runTasks()) {
        fwrite(STDERR, "peer.php: " . $c->error() . "\n");
        exit(1);
    }
} elseif ($mode === 'inflight') {
    for ($done = 0; $done < $n; $done += $m) {
        $m = min($k, $n - $done);
        for ($i = 0; $i < $m; $i++) {
            $c->addTask('noop', 'x');
        }
        if (!$c->runTasks()) {
            fwrite(STDERR, "peer.php: " . $c->error() . "\n");
            exit(1);
        }
    }
} else {
    for ($i = 0; $i < $n; $i++) {
        $c->doNormal('noop', 'x');
        if ($c->returnCode() != GEARMAN_SUCCESS) {
            fwrite(STDERR, "peer.php: " . $c->error() . "\n");
            exit(1);
        }
    }
}
printf("%.6f\n", microtime(true) - $t0);
