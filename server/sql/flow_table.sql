-- Flow control settings (dsjobd's --limit, limit, pause, resume), one line
-- of words a function, made if missing at every start, outside the schema
-- version: a dsjobd that does not know the table leaves it alone.
CREATE TABLE IF NOT EXISTS dsjob.flow (name text PRIMARY KEY, settings text NOT NULL)
