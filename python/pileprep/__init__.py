"""pileprep's loader: Megatron-core's IndexedDataset, GPTDataset and blending, reproduced exactly.

    import pileprep
    ds = pileprep.IndexedDataset("data/my-gpt3_00_text_document")
    ds[0]                       # numpy view of sequence 0 (uint16 or int32), zero-copy, read-only
    ds[2:5]                     # a list of views of sequences 2, 3, 4 (contiguous slices only)
    ds.get(7, offset=3, length=10)  # 10 tokens of sequence 7 from its token 3 (Megatron's get)
    g = pileprep.GPTDataset("0.3 A 0.7 B", seq_length=2048, num_samples=10**6, split="969,30,1")
    g[0]                        # int64 array of seq_length + 1 tokens: Megatron's sample 0

IndexedDataset's slices and get() are Megatron's IndexedDataset's, quirks included (see their
docstrings: get() reads past a sequence's end into the next ones, as numpy.frombuffer over the .bin
does there). GPTDataset takes Megatron's --data-path list too (["0.3", "A", "0.7", "B"], prefixes
stripped as get_blend_from_list strips them) and mid_level_dataset_surplus (default 0.005).

`TorchGPTDataset` (when torch is importable) wraps a GPTDataset as a torch Dataset that returns
Megatron's dict: tokens, labels, loss_mask, position_ids (and attention_mask on request), with
dataset_id first for a blend; index None gives Megatron-core's padding sample (loss_mask all 0).
"""
import numpy

from ._pileprep import (  # noqa: F401
    GPTDataset,
    IndexedDataset,
    blending_indices,
    exhaustive_blending_indices,
    split_ranges,
)

__all__ = [
    "GPTDataset",
    "IndexedDataset",
    "blending_indices",
    "exhaustive_blending_indices",
    "split_ranges",
]

def _rebuild(cls, base, args, state):
    """Unpickles an instance of a Python subclass of a pileprep dataset (their __reduce__): the
    pileprep class's __init__ with the arguments it was made from (the subclass's own __init__ may
    take others), then the instance's attributes."""
    obj = cls.__new__(cls)
    base.__init__(obj, *args)
    if state:
        obj.__dict__.update(state)
    return obj


try:
    import torch as _torch
except ImportError:  # the loader itself needs only numpy
    _torch = None


def _megatron_sample(text, seq_length, add_extra_token, eod_token, eod_mask_loss, pad_token,
                     create_attention_mask, torch):
    """GPTDataset.__getitem__'s tensors for one sample (default position ids and attention mask).

    As Megatron does it: a sample shorter than seq_length (+1 with the extra token), the last one of a
    validation split kept with drop_last_partial_validation_sequence=False, is padded with pad_token;
    positions whose label is pad_token are masked out of the loss; and pad_token becomes 0 in tokens
    and labels, so that the embedding can look it up and the loss never sees a negative target.
    """
    want = seq_length + (1 if add_extra_token else 0)
    if len(text) < want:
        text = numpy.concatenate([numpy.asarray(text, dtype=numpy.int64),
                                  numpy.full(want - len(text), pad_token, dtype=numpy.int64)])
    text = torch.from_numpy(numpy.asarray(text, dtype=numpy.int64))
    if add_extra_token:
        tokens = text[:-1].contiguous()
        labels = text[1:].contiguous()
    else:
        tokens = text
        labels = torch.roll(text, shifts=-1, dims=0)
        labels[-1] = pad_token
    loss_mask = torch.ones(tokens.shape[0], dtype=torch.float)
    if eod_mask_loss and eod_token is not None:
        loss_mask[tokens == eod_token] = 0.0
    loss_mask[labels == pad_token] = 0.0
    tokens[tokens == pad_token] = 0
    labels[labels == pad_token] = 0
    sample = {
        "tokens": tokens,
        "labels": labels,
        "loss_mask": loss_mask,
        "position_ids": torch.arange(tokens.shape[0], dtype=torch.long),
    }
    if create_attention_mask:
        n = tokens.shape[0]
        sample["attention_mask"] = torch.tril(torch.ones((n, n))).unsqueeze(0) < 0.5
    return sample


def _torch_sample(dataset, idx, eod_token, eod_mask_loss, pad_token, create_attention_mask, torch):
    """TorchGPTDataset.__getitem__: Megatron's sample dict for sample idx of a GPTDataset.

    As Megatron-core: idx None is a padding sample (sample 0's tokens, its loss masked out whole),
    which its batch samplers ask for to fill a last batch; a blend's sample starts with its
    dataset's id (BlendedDataset's "dataset_id", a numpy int16 as dataset_index holds it).
    """
    i = 0 if idx is None else idx
    sample = _megatron_sample(dataset[i], dataset.seq_length, dataset.add_extra_token, eod_token,
                              eod_mask_loss, pad_token, create_attention_mask, torch)
    if idx is None:
        sample["loss_mask"] = torch.zeros_like(sample["loss_mask"])
    if dataset.is_blend:
        sample = {"dataset_id": dataset.dataset_index[i], **sample}
    return sample


if _torch is not None:

    class TorchGPTDataset(_torch.utils.data.Dataset):
        """A torch Dataset over a pileprep.GPTDataset, returning Megatron's sample dict.

        TorchGPTDataset(pileprep.GPTDataset(...), eod_token=50256, eod_mask_loss=False,
                        pad_token=-1, create_attention_mask=False)
        """

        def __init__(self, dataset, eod_token=50256, eod_mask_loss=False, pad_token=-1,
                     create_attention_mask=False):
            self.dataset = dataset
            self.eod_token = eod_token
            self.eod_mask_loss = eod_mask_loss
            self.pad_token = pad_token
            self.create_attention_mask = create_attention_mask

        def __len__(self):
            return len(self.dataset)

        def __getitem__(self, idx):
            return _torch_sample(self.dataset, idx, self.eod_token, self.eod_mask_loss,
                                 self.pad_token, self.create_attention_mask, _torch)

    __all__.append("TorchGPTDataset")
