"""A small GNMT: LSTM encoder-decoder with attention (Wu et al. 2016), and its PyTorch twin.

The layout of MLPerf's GNMT reference at toy size, teacher-forced (the whole target
sequence at once, batch_first):

    encoder: embedder -> rnn_layers.0 bidirectional LSTM -> rnn_layers.1 LSTM(2H, H)
             -> rnn_layers.2.. LSTM(H, H), each adding its input (residual)        memory (N, S, H)
    decoder: embedder -> att_rnn LSTM(H, H) -> attention over memory (additive:
             v . tanh(W_q q + W_k k), source padding masked) -> rnn_layers.0 .. on
             cat(x, context), residual from rnn_layers.1 on -> classifier    logits (N, T, tgt_vocab)

Dropout precedes every LSTM and the classifier; decoder LSTMs start from zero states,
as in the reference. Config (defaults): src_vocab=tgt_vocab=256, hidden=128,
num_layers=4 (per side, >= 2), dropout=0.2, padding_idx=0: 1,582,592 parameters.
Sources are not packed: padded positions run through the encoder LSTMs like tokens
(the backward direction reads them first) and only the attention ignores them, via
`src_padding_mask` (N, S), True at padding. Embeddings start U(-0.1, 0.1) as GNMT's.
"""

import types

from jaxdl.models._frameworks import twin_builder, two_frameworks
from jaxdl.models._registry import register_model


def _define(nn, F, ops):  # noqa: N803 - `nn`/`F` as in model code
    def lstm(input_size, hidden, bidirectional=False):
        return nn.LSTM(input_size, hidden, batch_first=True, bidirectional=bidirectional)

    def embedding(vocab, hidden, padding_idx):
        table = nn.Embedding(vocab, hidden, padding_idx=padding_idx)
        table.weight = nn.init.uniform_(table.weight, -0.1, 0.1)
        return table

    class AdditiveAttention(nn.Module):
        """Bahdanau attention: weights softmax_s(v . tanh(W_q q_t + W_k k_s)), output sum_s w k_s."""

        def __init__(self, hidden):
            super().__init__()
            self.linear_q = nn.Linear(hidden, hidden)
            self.linear_k = nn.Linear(hidden, hidden, bias=False)
            self.linear_att = nn.Linear(hidden, 1, bias=False)  # v; a bias would cancel in softmax

        def forward(self, query, keys, padding_mask=None):
            # (N, T, 1, H) + (N, 1, S, H): every query against every key.
            energy = ops.tanh(self.linear_q(query)[:, :, None] + self.linear_k(keys)[:, None])
            scores = self.linear_att(energy)[..., 0]  # (N, T, S)
            if padding_mask is not None:
                scores = ops.masked_fill(scores, padding_mask[:, None], float("-inf"))
            return F.softmax(scores, dim=-1) @ keys

    class Encoder(nn.Module):
        def __init__(self, vocab, hidden, num_layers, dropout, padding_idx):
            super().__init__()
            self.embedder = embedding(vocab, hidden, padding_idx)
            self.rnn_layers = nn.ModuleList(
                [lstm(hidden, hidden, bidirectional=True), lstm(2 * hidden, hidden)]
                + [lstm(hidden, hidden) for _ in range(num_layers - 2)])
            self.dropout = nn.Dropout(dropout)

        def forward(self, src):
            x = self.embedder(src)
            for i, rnn in enumerate(self.rnn_layers):
                y = rnn(self.dropout(x))[0]
                # Residuals need equal widths: from the third layer on (GNMT).
                x = x + y if i >= 2 else y
            return x

    class Decoder(nn.Module):
        def __init__(self, vocab, hidden, num_layers, dropout, padding_idx):
            super().__init__()
            self.embedder = embedding(vocab, hidden, padding_idx)
            self.att_rnn = lstm(hidden, hidden)
            self.attention = AdditiveAttention(hidden)
            self.rnn_layers = nn.ModuleList([lstm(2 * hidden, hidden)
                                             for _ in range(num_layers - 1)])
            self.dropout = nn.Dropout(dropout)
            self.classifier = nn.Linear(hidden, vocab)

        def forward(self, tgt, memory, src_padding_mask=None):
            x = self.att_rnn(self.dropout(self.embedder(tgt)))[0]
            context = self.attention(x, memory, src_padding_mask)
            for i, rnn in enumerate(self.rnn_layers):
                # Every layer sees the attention context (GNMT); residuals from the second on.
                y = rnn(self.dropout(ops.cat([x, context], -1)))[0]
                x = x + y if i >= 1 else y
            return self.classifier(self.dropout(x))

    class GNMT(nn.Module):
        def __init__(self, src_vocab=256, tgt_vocab=256, hidden=128, num_layers=4, dropout=0.2,
                     padding_idx=0):
            super().__init__()
            if num_layers < 2:
                raise ValueError(f"GNMT needs num_layers >= 2 (a bidirectional layer and the "
                                 f"layer that merges its directions), got {num_layers}")
            self.encoder = Encoder(src_vocab, hidden, num_layers, dropout, padding_idx)
            self.decoder = Decoder(tgt_vocab, hidden, num_layers, dropout, padding_idx)

        def forward(self, src, tgt, src_padding_mask=None):
            """src (N, S) and tgt (N, T) token ids -> logits (N, T, tgt_vocab)."""
            return self.decoder(tgt, self.encoder(src), src_padding_mask)

    return types.SimpleNamespace(GNMT=GNMT, AdditiveAttention=AdditiveAttention)


JAXDL, TORCH = two_frameworks(_define)


@register_model("gnmt", torch_twin=twin_builder(TORCH, "GNMT"),
                description="small GNMT: LSTM encoder-decoder with additive attention")
def gnmt(src_vocab=256, tgt_vocab=256, hidden=128, num_layers=4, dropout=0.2, padding_idx=0):
    return JAXDL.GNMT(src_vocab, tgt_vocab, hidden, num_layers, dropout, padding_idx)
