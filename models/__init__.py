"""Image models found by name; parameters carry logical axis names only."""

from models.registry import MODEL_NAMES
from models.registry import create_model
from models.registry import has_batch_norm
