-- After the INSERT of a batch's adds, in its transaction: the edges of the
-- children among them (dsjob.deps_add), $1 the children's handles (each
-- child's edges together), $2 their parents', $3 their policies. Returns
-- the children refused, with why.
SELECT child, why FROM dsjob.deps_add($1::text[], $2::text[], $3::int2[])
