-- A function back to the defaults: $1 its name.
DELETE FROM dsjob.funcs WHERE name = $1::text
