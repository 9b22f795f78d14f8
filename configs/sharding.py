"""Named sets of sharding rules: logical parameter axis -> mesh axes.

Recipes pick one as `config.sharding_rules`, the command line by name
(`--config.sharding_rules=FSDP`, resolved by cli/config_loader.py); the
mesh sizes (`config.mesh`) then decide how many ways each mesh axis splits.
With mesh.fsdp=1 and mesh.tensor=1 every set below is plain data
parallelism, so a recipe can keep its rules and change only the mesh.
"""

# Everything replicated; the batch split over data (and fsdp, if set).
DATA_PARALLEL = (
    ('batch', 'data,fsdp'),
)

# ZeRO-3 style: each parameter (and its optimiser state) split over fsdp on
# its model-width axis, gathered just in time for use.
FSDP = (
    ('batch', 'data,fsdp'),
    ('embed', 'fsdp'),
    ('conv_out', 'fsdp'),
)

# FSDP plus Megatron-style tensor parallelism: attention heads and the MLP's
# hidden units (ResNet: input channels) split over tensor.
FSDP_TENSOR = FSDP + (
    ('mlp', 'tensor'),
    ('heads', 'tensor'),
    ('conv_in', 'tensor'),
)

# The sets above by name, as --config.sharding_rules=NAME gives them; a run
# saves the rules themselves, so its config.json does not depend on a name.
NAMED = {
    'DATA_PARALLEL': DATA_PARALLEL,
    'FSDP': FSDP,
    'FSDP_TENSOR': FSDP_TENSOR,
}
