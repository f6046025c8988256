-- A function without flow control settings: $1 its name.
DELETE FROM dsjob.flow WHERE name = $1::text
