# Write the fixture corpus with Julia's JLD2:
#     julia --project=. generate.jl OUTDIR
# One `flux_<name>.jld2` per model of models.jl (`model_state = Flux.state(model)`, exactly as
# `jldsave(path; model_state)` in Flux's docs), plus files of plain values and compressed arrays.
using Flux, JLD2, Random
include("models.jl")
include("arrays.jl")

out = isempty(ARGS) ? joinpath(@__DIR__, "out", "julia") : ARGS[1]
mkpath(out)
Random.seed!(42)

for (name, make) in MODELS
    jldsave(joinpath(out, "flux_$name.jld2"); model_state = Flux.state(make()))
end

jldsave(joinpath(out, "values.jld2");
    int = 42, f16 = Float16(0.5), f32 = 1.5f0, f64 = 2.5, i8 = Int8(-3), u64 = UInt64(7),
    i128 = Int128(2)^100, b = true, c64 = ComplexF32(1, 2), c128 = 1.0 + 2.0im,
    s = "héllo", sym = :relu, n = nothing, m = missing, e = (),
    tup = (1, 2.0f0, "x"), ntup = Tuple(1.0:12.0), nt = (a = 1, b = [1.0, 2.0], σ² = 0.5f0),
    vany = Any[1, "a", nothing, [1, 2]], vstr = ["a", "bb", ""], vsym = [:a, :b],
    dict = Dict("a" => 1.0, "b" => 2.0), zerod = fill(3.5), empty = Float32[],
    mat = reshape(collect(Float32, 1:6), 2, 3), cube = rand(Int16, 2, 3, 4), bits = [true, false, true])
jldopen(joinpath(out, "groups.jld2"), "w") do f
    f["a/x"] = [1, 2, 3]
    f["top"] = (1, 2)
    f["a/b/y"] = "deep"
end
# compressed_arrays() (arrays.jl): large enough that `treexchange convert --compress` writes them
# in its multi-chunk, width-fallback and two-level B-tree layouts, which verify.jl then loads.
jldsave(joinpath(out, "compressed.jld2"), true;
    x = rand(Float32, 100, 100), y = collect(1:1000), compressed_arrays()...)
println("wrote ", length(readdir(out)), " files to ", out)
