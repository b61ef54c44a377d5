# Check that Julia's JLD2 loads treexchange-written files as the same Julia values:
#     julia --project=. verify.jl JULIA_DIR TREEXCHANGE_DIR
# For every `.jld2` in TREEXCHANGE_DIR, the file of the same name in JULIA_DIR (written by
# generate.jl) is the reference: every name must load with the same type and an equal value
# (`isequal`: NaN and missing compare equal), and every `flux_<name>.jld2` state must go into a
# fresh model of models.jl with `Flux.loadmodel!` and come back out unchanged.
using Flux, JLD2, Test
include("models.jl")

length(ARGS) == 2 || error("usage: julia --project=. verify.jl JULIA_DIR TREEXCHANGE_DIR")
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
