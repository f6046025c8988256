-- A function's flow settings changed: the other servers read them again.
SELECT pg_notify('dsjob', 'flow')
