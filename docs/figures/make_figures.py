"""The README's figures: ELECTRA's architecture, and a pretraining run's curves and replaced-token
view read from its TensorBoard events.

  python docs/figures/make_figures.py --model_dir demo_data/models/quickstart [--out DIR]

writes into DIR (by default MODEL_DIR/figures; `--out docs/figures` replaces the README's)
architecture.png, and from the run quickstart_curves.png (its losses and the
discriminator's AUC against the step) and replaced_tokens.png (the TensorBoard text sample of its
last step: the tokens the generator replaced and the discriminator's verdict on every token).
"""

from __future__ import annotations

import argparse
import os
import re

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

from electra_tf import progress  # noqa: E402

CURVES = (("loss", "total loss (MLM + 50 x detection)"), ("masked_lm_loss", "generator: masked-LM loss"),
          ("disc_loss", "discriminator: detection loss"), ("disc_auc", "discriminator: AUC"))


def plot_curves(scalars: dict[str, dict[int, float]], path: str) -> None:
    fig, axes = plt.subplots(1, len(CURVES), figsize=(14, 3.2))
    for ax, (tag, title) in zip(axes, CURVES):
        steps = sorted(scalars.get(tag, {}))
        ax.plot(steps, [scalars[tag][s] for s in steps], marker=".", color="tab:blue")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def parse_sample(markdown: str) -> list[dict[str, str | float | bool]]:
    """The rows of run_pretraining.py's text sample (pos | original | masked input | generator
    sample | replaced | p(replaced))."""
    rows = []
    for line in markdown.splitlines()[2:]:
        cells = [c.strip().replace("\\|", "|")
                 for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]
        if len(cells) < 6:
            raise ValueError(f"not a replaced-token sample row: {line!r}")
        rows.append({"original": cells[1], "masked": cells[2] == "[MASK]", "sample": cells[3],
                     "replaced": cells[4] == "yes", "p": float(cells[5].split()[0])})
    return rows


def plot_replaced_tokens(rows: list[dict], path: str, per_line: int = 14) -> None:
    """Each token shaded by the discriminator's p(replaced) (scale on the right); the generator's
    replacements in red with the original below; the positions the generator saw as [MASK]
    framed (the other chosen positions kept their token in the generator's input)."""
    lines = [rows[i:i + per_line] for i in range(0, len(rows), per_line)]
    fig, ax = plt.subplots(figsize=(14, 0.75 * len(lines) + 1.0))
    # Greys up to 85%: the darkest shade still shows the token's frame.
    cmap = ListedColormap(plt.get_cmap("Greys")(np.linspace(0.0, 0.85, 256)))
    for y, line in enumerate(lines):
        for x, row in enumerate(line):
            dark = row["p"] > 0.5  # the shading is darker than the text: write it in white
            if row["replaced"]:
                color = "#ff9a9a" if dark else "red"
            else:
                color = "white" if dark else "black"
            ax.text(x, -y, row["sample"], ha="center", va="center", fontsize=9, color=color,
                    fontweight="bold" if row["replaced"] else "normal",
                    bbox={"boxstyle": "round,pad=0.25", "facecolor": cmap(row["p"]),
                          "edgecolor": "tab:blue" if row["masked"] else "none", "linewidth": 1.5})
            if row["replaced"]:
                ax.text(x, -y - 0.38, f"was: {row['original']}", ha="center", va="center",
                        fontsize=7, color="gray")
    ax.set_xlim(-0.7, per_line - 0.3)
    ax.set_ylim(-len(lines) + 0.3, 0.8)
    ax.axis("off")
    ax.set_title("Discriminator input. Red: replaced by the generator (the original below); "
                 "blue frame: [MASK] in the generator's input; shading: the discriminator's "
                 "p(replaced)", fontsize=9)
    colorbar = fig.colorbar(plt.cm.ScalarMappable(plt.Normalize(0, 1), cmap), ax=ax,
                            fraction=0.015, pad=0.01, ticks=[0, 0.5, 1])
    colorbar.set_label("p(replaced)", fontsize=8)
    colorbar.ax.tick_params(labelsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_architecture(path: str) -> None:
    fig, ax = plt.subplots(figsize=(12, 3.0))
    boxes = {
        "text": (0.0, "the chef\ncooked the meal", "input (WordPiece tokens)"),
        "masked": (2.5, "[MASK] chef\n[MASK] the meal", "15% of positions masked"),
        "generator": (5.0, "generator\n(small masked LM)", "samples a token at each mask"),
        "corrupted": (7.5, "the chef\nate the meal", "corrupted input"),
        "discriminator": (10.0, "discriminator\n(the encoder kept)",
                          "original or replaced, at every token:\n"
                          "orig. orig. REPLACED orig. orig."),
    }
    for x, label, caption in boxes.values():
        ax.add_patch(FancyBboxPatch((x, 0.35), 2.0, 0.9, boxstyle="round,pad=0.05",
                                    facecolor="#dbe9f6", edgecolor="tab:blue"))
        ax.text(x + 1.0, 0.8, label, ha="center", va="center", fontsize=9)
        ax.text(x + 1.0, 0.05, caption, ha="center", va="top", fontsize=8, color="dimgray")
    for left in (0.0, 2.5, 5.0, 7.5):
        ax.add_patch(FancyArrowPatch((left + 2.05, 0.8), (left + 2.45, 0.8),
                                     arrowstyle="-|>", mutation_scale=12))
    # The generator and discriminator read their tokens through one embedding matrix.
    ax.add_patch(FancyArrowPatch((6.0, 1.3), (11.0, 1.3), connectionstyle="arc3,rad=-0.25",
                                 arrowstyle="<|-|>", mutation_scale=10, linestyle="--",
                                 color="tab:green"))
    ax.text(8.5, 1.95, "shared token embeddings", ha="center", fontsize=8, color="tab:green")
    ax.text(6.0, -0.75, "trained together: loss = generator's MLM loss + 50 x discriminator's "
            "detection loss.  After pretraining the generator is dropped and the discriminator "
            "is fine-tuned.", ha="center", fontsize=9)
    ax.set_xlim(-0.2, 12.2)
    ax.set_ylim(-0.95, 2.15)
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_dir", required=True, help="a pretraining run's model dir")
    # Not docs/figures by default: the README's figures are tracked files.
    parser.add_argument("--out", help="where to write the figures (default MODEL_DIR/figures; "
                        "docs/figures replaces the README's)")
    args = parser.parse_args()
    args.out = args.out or os.path.join(args.model_dir, "figures")
    scalars, texts = progress.read_events(args.model_dir)
    if "example" not in texts or "disc_auc" not in scalars:
        raise SystemExit(f"{args.model_dir}: no ELECTRA text sample or discriminator metrics in "
                         "its TensorBoard events (run with text_summary_steps > 0)")
    os.makedirs(args.out, exist_ok=True)
    plot_architecture(os.path.join(args.out, "architecture.png"))
    plot_curves(scalars, os.path.join(args.out, "quickstart_curves.png"))
    last = max(texts["example"])
    plot_replaced_tokens(parse_sample(texts["example"][last]),
                         os.path.join(args.out, "replaced_tokens.png"))
    print(f"wrote architecture.png, quickstart_curves.png, replaced_tokens.png (step {last}) "
          f"to {args.out}")


if __name__ == "__main__":
    main()
