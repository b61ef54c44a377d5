# Check that Julia's JLD2 loads treexchange-written files as the same Julia values:
#     julia --project=. verify.jl JULIA_DIR TREEXCHANGE_DIR
# For every `.jld2` in TREEXCHANGE_DIR, the file of the same name in JULIA_DIR (written by
# generate.jl) is the reference: every name must load with the same type and an equal value
# (`isequal`: NaN and missing compare equal), and every `flux_<name>.jld2` state must go into a
# fresh model of models.jl with `Flux.loadmodel!` and come back out unchanged.
#     julia --project=. verify.jl --python PYTHON_DIR
# checks the files write_python_side.py wrote from Python values (no Julia file to compare
# with: the expected values are rebuilt here).
using Flux, JLD2, Test
include("models.jl")
include("arrays.jl")

length(ARGS) == 2 || error("usage: julia --project=. verify.jl (JULIA_DIR | --python) DIR")

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
