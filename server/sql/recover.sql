-- Which of the handles $1 are in the table (a batch whose answer was lost).
SELECT handle FROM dsjob.jobs WHERE handle = ANY($1::text[])
