# Arrays that exercise treexchange's riskier compressed layouts, built from formulas so that
# generate.jl, write_python_side.py and verify.jl make the very same values (i, j, k 1-based;
# every value is exact in its element type).
#   big:  8 MiB Float32 matrix         -> 8 chunks of 1 MiB, one-level v1 B-tree
#   v70k: 70,000 Float64               -> one chunk whose dims need 3-byte widths: B-tree fallback
#   tall: 1024 x 17,000 Float32 (66 MiB) -> 67 chunks, more than one B-tree node holds: two levels
compressed_arrays() = (
    big = Float32[mod(7i + 13j, 1001) / 8 for i in 1:1024, j in 1:2048],
    v70k = Float64[mod(k, 977) / 4 for k in 1:70_000],
    tall = Float32[mod(i + 3j, 4099) for i in 1:1024, j in 1:17_000],
)
