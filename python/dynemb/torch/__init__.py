"""dynemb's PyTorch front end: dynamic tables as modules with dynamicemb's names."""

from .jagged import JaggedTensor, KeyedJaggedTensor, KeyedTensor
from .modules import (
    DynamicEmbedding,
    DynamicEmbeddingBag,
    DynamicEmbeddingBagCollection,
    DynamicEmbeddingCollection,
    DynamicEmbModule,
    EmbeddingBagConfig,
    EmbeddingConfig,
)

__all__ = [
    "DynamicEmbedding",
    "DynamicEmbeddingBag",
    "DynamicEmbeddingBagCollection",
    "DynamicEmbeddingCollection",
    "DynamicEmbModule",
    "EmbeddingBagConfig",
    "EmbeddingConfig",
    "JaggedTensor",
    "KeyedJaggedTensor",
    "KeyedTensor",
]
