-- A function's flow control settings: $1 its name, $2 the settings line.
INSERT INTO dsjob.flow VALUES ($1::text, $2::text)
ON CONFLICT (name) DO UPDATE SET settings = excluded.settings
