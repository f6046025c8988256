-- The live job an add coalesced onto: $1 its function, $2 its unique key.
SELECT handle FROM dsjob.jobs WHERE state = 0 AND func = $1::text AND uniq = $2::bytea
