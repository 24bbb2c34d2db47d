"""A small GPT: a decoder-only transformer language model, and its PyTorch twin.

GPT-2's layout (Radford et al. 2019) at toy size, built from PyTorch's layers:

    tokens (N, T) int, T <= context
    tok_emb(tokens) + pos_emb(0..T-1) -> drop
    blocks.0 .. blocks.{num_layers-1}: nn.TransformerEncoderLayer with norm_first=True
        (pre-LayerNorm), GELU, batch_first=True, under a causal mask
    ln_f -> logits (N, T, vocab_size): x @ tok_emb.weight.T when tie_weights, else `head`

Config (defaults): vocab_size=256 (bytes), context=128, d_model=128, num_layers=4,
num_heads=4, dim_feedforward=4*d_model, dropout=0.1, tie_weights=True: 842,496
parameters tied, 875,264 untied. Embeddings start N(0, 0.02) as GPT-2's (with N(0, 1),
PyTorch's Embedding default, tied logits would start at a scale of ~sqrt(d_model));
the blocks keep PyTorch's TransformerEncoderLayer initialisation.
"""

import types

from jaxdl.models._frameworks import twin_builder, two_frameworks
from jaxdl.models._registry import register_model


def _define(nn, F, ops):  # noqa: N803 - `nn`/`F` as in model code
    class GPT(nn.Module):
        def __init__(self, vocab_size=256, context=128, d_model=128, num_layers=4, num_heads=4,
                     dim_feedforward=None, dropout=0.1, tie_weights=True):
            super().__init__()
            self.context = context
            self.tie_weights = tie_weights
            self.tok_emb = nn.Embedding(vocab_size, d_model)
            self.pos_emb = nn.Embedding(context, d_model)
            self.drop = nn.Dropout(dropout)
            self.blocks = nn.ModuleList([
                nn.TransformerEncoderLayer(d_model, num_heads, dim_feedforward or 4 * d_model,
                                           dropout, activation="gelu", batch_first=True,
                                           norm_first=True)
                for _ in range(num_layers)])
            self.ln_f = nn.LayerNorm(d_model)
            if not tie_weights:
                self.head = nn.Linear(d_model, vocab_size, bias=False)
            for m in (self.tok_emb, self.pos_emb):
                m.weight = nn.init.normal_(m.weight, 0.0, 0.02)

        def forward(self, tokens):
            if tokens.shape[1] > self.context:
                raise ValueError(f"GPT: sequence length {tokens.shape[1]} exceeds the context "
                                 f"{self.context}")
            x = self.drop(self.tok_emb(tokens) + self.pos_emb(ops.positions(tokens))[None])
            mask = ops.causal_mask(tokens)
            for block in self.blocks:
                x = block(x, src_mask=mask)
            x = self.ln_f(x)
            return F.linear(x, self.tok_emb.weight) if self.tie_weights else self.head(x)

    return types.SimpleNamespace(GPT=GPT)


JAXDL, TORCH = two_frameworks(_define)


@register_model("gpt", torch_twin=twin_builder(TORCH, "GPT"),
                description="small decoder-only transformer LM (4 layers, d_model 128)")
def gpt(vocab_size=256, context=128, d_model=128, num_layers=4, num_heads=4,
        dim_feedforward=None, dropout=0.1, tie_weights=True):
    return JAXDL.GPT(vocab_size, context, d_model, num_layers, num_heads, dim_feedforward,
                     dropout, tie_weights)
