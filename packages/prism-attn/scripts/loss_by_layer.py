"""Where Prism's attention loss comes from: the mean loss of each layer (and the mean over the sparse
layers, the number `reproduce` reports) on testbed attention, for several settings at κ = n/16.

    python scripts/loss_by_layer.py tiny-m 2048 oracle anchors=0,5 \
        anchors=0,5+g=2 anchors=0,5+g=4 anchors=0,5+g=8 anchors=0,5+approx=24+g=2

Settings use ``needle_sweep.py``'s syntax, plus ``approx=R``: a diagnostic global term that is *not*
the package's — instead of ranking pages by the Quest bound it ranks blocks by approximate scores from
the R largest-|q| dimensions of each KV group (SparQ's idea, with its temperature correction), to see
whether a better coarse ranking brings Prism to the oracle. Decode steps: the last 8 positions (37
apart) of two held-out NIAH samples (seeds 0, 1), each layer fed the dense q, K, V, as in `reproduce`.
"""

import argparse
import math

import torch
from needle_sweep import parse
from prism_attn import decoder
from prism_attn.decoder import decode_step
from prism_attn.experiments import testbed_steps
from prism_attn.ops import attention_loss


def approx_global_term(dims: int):
    """A PrismDecoder._global_term replacement: the top blocks by a pooled softmax of approximate scores."""

    def term(self, layer, q, K, n, kappa, row, scaling):
        cfg = self.config
        count, block = cfg.global_count(kappa), cfg.block_for(kappa)
        B, H, d = q.shape
        Hk = K.shape[1]
        qg = q.view(B, Hk, H // Hk, d)
        top = qg.abs().sum(2).topk(min(dims, d), dim=-1).indices  # one dimension set per KV group
        qr = torch.gather(qg, 3, top[:, :, None].expand(-1, -1, H // Hk, -1))
        kr = torch.gather(K, 3, top[:, :, None].expand(-1, -1, n, -1))
        temperature = (qr.abs().sum(-1, keepdim=True) / qg.abs().sum(-1, keepdim=True)).sqrt()
        pooled = torch.softmax(torch.einsum("bhgr,bhnr->bhgn", qr, kr) * scaling / temperature, -1).sum(2)
        nb = math.ceil(n / block)
        blocks = torch.nn.functional.pad(pooled, (0, nb * block - n), value=-1.0).view(B, Hk, nb, block)
        best = blocks.amax(-1)
        # the sink and local blocks are candidates anyway
        first, last = math.ceil(cfg.sink / block), max(0, n - cfg.local) // block
        best[..., :first] = -1.0
        best[..., last:] = -1.0
        return best.topk(min(count, max(0, last - first)), dim=-1).indices.sort(-1).values

    return term


def per_layer_loss(steps, cfg) -> list[float]:
    sums, count = None, 0
    for qs_by_pos, ks_by_pos, vs_by_pos, scalings in steps:
        for qs, Ks, Vs in zip(qs_by_pos, ks_by_pos, vs_by_pos):
            _, sels = decode_step(qs, Ks, Vs, cfg, backend="torch")
            row = [
                float("nan") if s is None else float(attention_loss(qs[i], Ks[i], s, scalings[i]).mean())
                for i, s in enumerate(sels)
            ]
            sums = row if sums is None else [a + b for a, b in zip(sums, row)]
            count += 1
    return [v / count for v in sums]


def main() -> None:
    import papershelf_lm as lm

    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("n", type=int)
    ap.add_argument("settings", nargs="+")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, _ = lm.load(args.model)
    steps = [testbed_steps(model, args.n, positions=8, seed=s) for s in (0, 1)]
    kappa = args.n // 16
    native = decoder.PrismDecoder._global_term
    print(f"{args.model} n={args.n} κ={kappa}: mean over sparse layers, then layers 0.. (- = dense layer)")
    oracle = None
    for spec in args.settings:
        parts = [p for p in spec.split("+") if not p.startswith("approx=")]
        approx = [int(p.split("=")[1]) for p in spec.split("+") if p.startswith("approx=")]
        cfg = parse("+".join(parts), kappa)
        decoder.PrismDecoder._global_term = approx_global_term(approx[0]) if approx else native
        try:
            losses = per_layer_loss(steps, cfg)
        finally:
            decoder.PrismDecoder._global_term = native
        sparse = [v for v in losses if v == v]
        mean = sum(sparse) / len(sparse)
        oracle = mean if spec == "oracle" else oracle
        ratio = f" ({mean / oracle:.2f}x oracle)" if oracle and spec != "oracle" else ""
        layers = " ".join("-" if v != v else f"{v:.5f}" for v in losses)
        print(f"{spec:36s} {mean:.6f}{ratio}  {layers}", flush=True)


if __name__ == "__main__":
    main()
