"""Neural collaborative filtering: NeuMF (He et al. 2017), and its PyTorch twin.

Two towers over separate user and item embeddings, fused by the last layer:

    GMF: mf_user_embed(user) * mf_item_embed(item)                       (N, mf_dim)
    MLP: cat(mlp_user_embed(user), mlp_item_embed(item)) -> mlp.0, mlp.1, ... each
         Linear + ReLU (+ dropout), widths mlp_layers                       (N, mlp_layers[-1])
    final: Linear(cat(GMF, MLP), 1) -> one logit per (user, item) pair      (N,)

Train with BCEWithLogitsLoss on observed vs sampled negative pairs. Names follow
MLPerf's NeuMF reference; defaults are the paper's MovieLens-1M setting (6040 users,
3706 items, predictive factors 8, MLP 64-32-16-8: 392,601 parameters); each MLP
embedding is mlp_layers[0] // 2 wide. Initialisation as MLPerf: embeddings
N(0, 0.01), MLP Glorot-uniform, final LeCun-uniform.
"""

import types

from jaxdl.models._frameworks import twin_builder, two_frameworks
from jaxdl.models._registry import register_model


def _define(nn, F, ops):  # noqa: N803 - `nn`/`F` as in model code
    class NeuMF(nn.Module):
        def __init__(self, num_users=6040, num_items=3706, mf_dim=8, mlp_layers=(64, 32, 16, 8),
                     dropout=0.0):
            super().__init__()
            if mlp_layers[0] % 2:
                raise ValueError(f"mlp_layers[0] ({mlp_layers[0]}) must be even: it is the user "
                                 "and item MLP embeddings side by side")
            self.mf_user_embed = nn.Embedding(num_users, mf_dim)
            self.mf_item_embed = nn.Embedding(num_items, mf_dim)
            self.mlp_user_embed = nn.Embedding(num_users, mlp_layers[0] // 2)
            self.mlp_item_embed = nn.Embedding(num_items, mlp_layers[0] // 2)
            self.mlp = nn.ModuleList([nn.Linear(a, b) for a, b in zip(mlp_layers, mlp_layers[1:])])
            self.dropout = nn.Dropout(dropout)
            self.final = nn.Linear(mf_dim + mlp_layers[-1], 1)
            for m in self.modules():
                if isinstance(m, nn.Embedding):
                    m.weight = nn.init.normal_(m.weight, 0.0, 0.01)
            for m in self.mlp:
                m.weight = nn.init.xavier_uniform_(m.weight)
            self.final.weight = nn.init.kaiming_uniform_(self.final.weight, nonlinearity="linear")

        def forward(self, user, item):
            gmf = self.mf_user_embed(user) * self.mf_item_embed(item)
            x = ops.cat([self.mlp_user_embed(user), self.mlp_item_embed(item)], -1)
            for layer in self.mlp:
                x = self.dropout(F.relu(layer(x)))
            return self.final(ops.cat([gmf, x], -1))[..., 0]

    return types.SimpleNamespace(NeuMF=NeuMF)


JAXDL, TORCH = two_frameworks(_define)


@register_model("ncf", torch_twin=twin_builder(TORCH, "NeuMF"),
                description="NeuMF neural collaborative filtering (GMF + MLP), logit per pair")
def ncf(num_users=6040, num_items=3706, mf_dim=8, mlp_layers=(64, 32, 16, 8), dropout=0.0):
    return JAXDL.NeuMF(num_users, num_items, mf_dim, tuple(mlp_layers), dropout)
