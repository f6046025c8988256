-- The rows of adds refused because their batch is not open (batch_join.sql
-- said so), in the transaction of their INSERT: $1 their handles.
DELETE FROM dsjob.jobs WHERE handle = ANY($1::text[]) AND state = 0
