-- Renew this server's leases: $1 the lease in seconds, $2 the owner.
UPDATE dsjob.jobs SET lease_until = now() + $1::int4 * interval '1 second'
WHERE owner = $2::text AND state = 0
RETURNING handle
