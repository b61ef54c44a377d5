# Check that Julia's JLD2 loads treexchange-written files as the same Julia values:
#     julia --project=. verify.jl JULIA_DIR TREEXCHANGE_DIR
# For every `.jld2` in TREEXCHANGE_DIR, the file of the same name in JULIA_DIR (written by
# generate.jl) is the reference: every name must load with the same type and an equal value
# (`isequal`: NaN and missing compare equal), and every `flux_<name>.jld2` state must go into a
# fresh model of models.jl with `Flux.loadmodel!` and come back out unchanged.
#     julia --project=. verify.jl --python PYTHON_DIR
# checks the files write_python_side.py wrote from Python values (no Julia file to compare
# with: the expected values are rebuilt here).
#     julia --project=. verify.jl --corpus CORPUS_DIR CONVERTED_DIR
# checks a corpus of other Julia-written files (tests/test_corpus.py runs the Python side) after
# `treexchange convert CORPUS_DIR/x.jld2 CONVERTED_DIR/x.jld2`: what only Julia can tell, namely
#   1. JLD2 loads the converted file (same names);
#   2. every name has the same Julia type in both (`typeof`, type parameters included: value
#      parameters such as `SArray{Tuple{2},Float64,1,2}`, `@enum`s, 128-bit integers);
#   3. equal values field by field, mutable structs included (`isequal` is `===` for them);
#   4. object identity is kept: two places that hold one mutable object in Julia's file hold one
#      object in ours too (RNG states, a struct referenced from two fields), cycles included.
# Still by hand: that JLD2 prints no "reconstructing type" warning for ours that it does not
# print for Julia's file, and `Flux.loadmodel!` of a corpus file's Flux states.
# Packages whose types the corpus uses (StaticArrays, DataFrames, CategoricalArrays, Random...)
# must be in the environment, or both files load as JLD2's reconstructed types.
using Flux, JLD2, Test
include("models.jl")
include("arrays.jl")

length(ARGS) in (2, 3) ||
    error("usage: julia --project=. verify.jl (JULIA_DIR | --python) DIR, or --corpus CORPUS_DIR CONVERTED_DIR")

# Field-by-field equality that also descends into mutable structs, and the map of objects seen
# (Julia's object => ours) so that identity (and cycles) are checked, not only values.
function same_value(a, b, seen::IdDict{Any,Any}=IdDict{Any,Any}())
    typeof(a) == typeof(b) || return false
    if ismutable(a) && !(a isa AbstractArray || a isa AbstractDict || a isa AbstractString)
        haskey(seen, a) && return seen[a] === b
        seen[a] = b
    end
    a isa AbstractArray && return size(a) == size(b) &&
        all(i -> isassigned(a, i) == isassigned(b, i) && (!isassigned(a, i) || same_value(a[i], b[i], seen)), eachindex(a))
    a isa AbstractDict && return length(a) == length(b) &&
        all(k -> haskey(b, k) && same_value(a[k], b[k], seen), keys(a))
    n = nfields(a)
    n == 0 && return isequal(a, b)
    return all(i -> isdefined(a, i) == isdefined(b, i) && (!isdefined(a, i) || same_value(getfield(a, i), getfield(b, i), seen)), 1:n)
end

if ARGS[1] == "--corpus"
    _, corpus_dir, converted_dir = ARGS
    @testset "JLD2 loads treexchange's conversions of a corpus as the same values" begin
        files = sort(filter(endswith(".jld2"), readdir(converted_dir)))
        @test !isempty(files)
        for file in files
            @testset "$file" begin
                theirs = JLD2.load(joinpath(corpus_dir, file))
                ours = JLD2.load(joinpath(converted_dir, file))
                @test Set(keys(ours)) == Set(keys(theirs))
                seen = IdDict{Any,Any}()  # one map for the whole file: identity across names
                for key in keys(theirs)
                    @test typeof(ours[key]) == typeof(theirs[key])
                    @test same_value(theirs[key], ours[key], seen)
                end
            end
        end
    end
    exit()
end

if ARGS[1] == "--python"
    @testset "JLD2 loads files treexchange wrote from Python" begin
        mlp = JLD2.load(joinpath(ARGS[2], "eqx_mlp.jld2"))
        model = eqx_mlp()
        Flux.loadmodel!(model, mlp["model_state"])
        @test isequal(Flux.state(model), mlp["model_state"])
        @test model(mlp["x"]) ≈ mlp["y"]  # the output Equinox computed for the same input
        compressed = JLD2.load(joinpath(ARGS[2], "compressed.jld2"))
        for (name, expected) in pairs(compressed_arrays())
            @test typeof(compressed[String(name)]) == typeof(expected)
            @test compressed[String(name)] == expected
        end
    end
    exit()
end

julia_dir, tx_dir = ARGS

@testset "JLD2 loads treexchange-written files" begin
    files = sort(filter(endswith(".jld2"), readdir(tx_dir)))
    @test !isempty(files)
    for file in files
        @testset "$file" begin
            ours = JLD2.load(joinpath(tx_dir, file))
            theirs = JLD2.load(joinpath(julia_dir, file))
            @test Set(keys(ours)) == Set(keys(theirs))
            for key in keys(theirs)
                @test typeof(ours[key]) == typeof(theirs[key])
                @test isequal(ours[key], theirs[key])
            end
            if startswith(file, "flux_")
                model = MODELS[file[6:end-5]]()
                Flux.loadmodel!(model, ours["model_state"])
                @test isequal(Flux.state(model), theirs["model_state"])
            end
        end
    end
end
