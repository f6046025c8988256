-- List this start ($1 its owner name, $2 its number) among those that may still run.
INSERT INTO dsjob.servers (owner, boot) VALUES ($1::text, $2::int8) ON CONFLICT (owner) DO NOTHING
