"""`jaxdl.data`: datasets and a grain-backed `DataLoader` with `torch.utils.data`'s names."""

from jaxdl.data import datasets
from jaxdl.data._collate import default_collate
from jaxdl.data._dataset import (
    ConcatDataset,
    Dataset,
    IterableDataset,
    Subset,
    TensorDataset,
    random_split,
)
from jaxdl.data._loader import DataLoader, epoch_order

__all__ = [
    "ConcatDataset", "DataLoader", "Dataset", "IterableDataset", "Subset", "TensorDataset",
    "datasets", "default_collate", "epoch_order", "random_split",
]
