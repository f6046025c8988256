-- Every function's stored flow control settings, for the servers sharing
-- the table to follow a change one of them made (at a NOTIFY 'flow' and at
-- each renewal).
SELECT name, settings FROM dsjob.flow ORDER BY name
