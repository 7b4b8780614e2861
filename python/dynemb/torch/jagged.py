"""Small keyed jagged batches, compatible with TorchRec's by duck typing.

`KeyedJaggedTensor` holds, for each key (feature), `stride` bags of ids laid out key by key:
values = ids of key 0's bags, then key 1's, ...; lengths[k * stride + b] ids in bag b of key k.
Any object with keys(), values(), lengths() or offsets() and weights_or_none() (TorchRec's
KeyedJaggedTensor among them) is accepted where these are.
"""

from typing import Dict, List, Optional

import torch


def _offsets_from_lengths(lengths: torch.Tensor) -> torch.Tensor:
    offsets = torch.zeros(lengths.numel() + 1, dtype=torch.int64, device=lengths.device)
    torch.cumsum(lengths.to(torch.int64), dim=0, out=offsets[1:])
    return offsets


class JaggedTensor:
    """One key's jagged rows: values [n, ...] and lengths [bags]."""

    def __init__(self, values: torch.Tensor, lengths: torch.Tensor,
                 weights: Optional[torch.Tensor] = None):
        self._values, self._lengths, self._weights = values, lengths, weights
        self._offsets: Optional[torch.Tensor] = None

    def values(self) -> torch.Tensor:
        return self._values

    def lengths(self) -> torch.Tensor:
        return self._lengths

    def offsets(self) -> torch.Tensor:
        if self._offsets is None:
            self._offsets = _offsets_from_lengths(self._lengths)
        return self._offsets

    def weights_or_none(self) -> Optional[torch.Tensor]:
        return self._weights

    def to_dense(self) -> List[torch.Tensor]:
        return list(torch.split(self._values, self._lengths.tolist()))


class KeyedJaggedTensor:
    """Ids of several keys in one batch (TorchRec's layout): keys, values, lengths or offsets
    (key-major, stride bags per key), optional per-id weights."""

    def __init__(self, keys: List[str], values: torch.Tensor,
                 weights: Optional[torch.Tensor] = None,
                 lengths: Optional[torch.Tensor] = None,
                 offsets: Optional[torch.Tensor] = None,
                 stride: Optional[int] = None,
                 offset_per_key: Optional[List[int]] = None):
        if lengths is None and offsets is None:
            raise ValueError("KeyedJaggedTensor: lengths or offsets must be given")
        self._keys = list(keys)
        self._values = values
        self._weights = weights
        self._lengths = lengths
        self._offsets = offsets
        self._offset_per_key = list(offset_per_key) if offset_per_key is not None else None
        n = (lengths.numel() if lengths is not None else offsets.numel() - 1)
        if stride is None:
            if len(self._keys) == 0:
                stride = 0
            elif n % len(self._keys) != 0:
                raise ValueError(
                    f"KeyedJaggedTensor: {n} bags do not split evenly over {len(self._keys)} keys; "
                    "give stride"
                )
            else:
                stride = n // len(self._keys)
        self._stride = stride

    @staticmethod
    def from_lengths_sync(keys: List[str], values: torch.Tensor, lengths: torch.Tensor,
                          weights: Optional[torch.Tensor] = None, stride: Optional[int] = None):
        return KeyedJaggedTensor(keys, values, weights=weights, lengths=lengths, stride=stride)

    @staticmethod
    def from_offsets_sync(keys: List[str], values: torch.Tensor, offsets: torch.Tensor,
                          weights: Optional[torch.Tensor] = None, stride: Optional[int] = None):
        return KeyedJaggedTensor(keys, values, weights=weights, offsets=offsets, stride=stride)

    def keys(self) -> List[str]:
        return self._keys

    def values(self) -> torch.Tensor:
        return self._values

    def weights(self) -> torch.Tensor:
        if self._weights is None:
            raise ValueError("KeyedJaggedTensor: no weights")
        return self._weights

    def weights_or_none(self) -> Optional[torch.Tensor]:
        return self._weights

    def lengths(self) -> torch.Tensor:
        if self._lengths is None:
            self._lengths = self._offsets[1:] - self._offsets[:-1]
        return self._lengths

    def offsets(self) -> torch.Tensor:
        if self._offsets is None:
            self._offsets = _offsets_from_lengths(self._lengths)
        return self._offsets

    def stride(self) -> int:
        return self._stride

    def offset_per_key(self) -> List[int]:
        """Each key's first id and the end (keys + 1 host ints): read from the offsets once
        (one device read on a GPU) and kept, as TorchRec's KeyedJaggedTensor does."""
        if self._offset_per_key is None:
            if self._stride == 0:
                self._offset_per_key = [0] * (len(self._keys) + 1)
            else:
                self._offset_per_key = self.offsets()[:: self._stride].tolist()
        return self._offset_per_key

    def length_per_key(self) -> List[int]:
        """Ids per key (host ints), from offset_per_key()."""
        o = self.offset_per_key()
        return [o[k + 1] - o[k] for k in range(len(self._keys))]

    def to(self, device, non_blocking: bool = False) -> "KeyedJaggedTensor":
        move = lambda t: None if t is None else t.to(device, non_blocking=non_blocking)
        return KeyedJaggedTensor(self._keys, move(self._values), move(self._weights),
                                 move(self._lengths), move(self._offsets), self._stride,
                                 self._offset_per_key)

    def to_dict(self) -> Dict[str, JaggedTensor]:
        starts = self.offset_per_key()
        lengths = self.lengths()
        out = {}
        for k, key in enumerate(self._keys):
            a, b = starts[k], starts[k + 1]
            w = None if self._weights is None else self._weights[a:b]
            out[key] = JaggedTensor(self._values[a:b],
                                    lengths[k * self._stride:(k + 1) * self._stride], w)
        return out

    def __repr__(self) -> str:
        return f"KeyedJaggedTensor(keys={self._keys}, stride={self._stride}, ids={self._values.numel()})"


class KeyedTensor:
    """Pooled outputs of several keys: to_dict() gives each key's [batch, dim] tensor (no copy),
    values() their concatenation along dim 1 (TorchRec's KeyedTensor layout, made on first use)."""

    def __init__(self, keys: List[str], tensors: List[torch.Tensor]):
        self._keys = list(keys)
        self._tensors = list(tensors)
        self._values: Optional[torch.Tensor] = None

    def keys(self) -> List[str]:
        return self._keys

    def length_per_key(self) -> List[int]:
        return [t.shape[1] for t in self._tensors]

    def values(self) -> torch.Tensor:
        if self._values is None:
            self._values = torch.cat(self._tensors, dim=1)
        return self._values

    def to_dict(self) -> Dict[str, torch.Tensor]:
        return dict(zip(self._keys, self._tensors))

    def __getitem__(self, key: str) -> torch.Tensor:
        return self._tensors[self._keys.index(key)]
