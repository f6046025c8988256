-- End this server's own lost session, backend $1.
SELECT pg_terminate_backend($1::int4)
