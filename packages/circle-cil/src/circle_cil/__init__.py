"""circle-cil — CIRCLE: fixed random BiRC2D reservoir features + streaming LDA heads for cold-start,
exemplar-free class-incremental learning.

M random bidirectional 2D reservoirs (never fit to data) turn an image into features; they are split
into G groups, each group feeds its own streaming-LDA head, and the heads' softmax outputs are
averaged. Training is ``partial_fit`` sample by sample: no replay, no task boundaries, no backprop.

>>> from circle_cil import CIRCLE, load_digits_dataset, class_incremental_stream
>>> d = load_digits_dataset()
>>> model = CIRCLE(n_reservoirs=4, n_groups=2, units=32, patch=2, seed=0)
>>> for task in class_incremental_stream(d, 5):
...     model.partial_fit(task.X_train, task.y_train)
>>> bool(model.score(d.X_test, d.y_test) > 0.9)
True

Shapes: images ``(N, C, H, W)`` (or ``(N, H, W)``) float; labels int ``(N,)``; features float32;
heads and probabilities float64.
"""

from circle_cil.baselines import FrozenCNN, JointCNN, LwF, RandomConvSLDA, SmallCNN
from circle_cil.circle import CIRCLE
from circle_cil.data import (
    GLYPHS,
    Dataset,
    Task,
    class_incremental_stream,
    glyph_dataset,
    load_dataset,
    load_digits_dataset,
    render_glyph,
)
from circle_cil.reservoir import BiRC2D, ReservoirBank, pool_map
from circle_cil.slda import StreamingLDA

__version__ = "0.1.0"

__all__ = [
    "CIRCLE",
    "GLYPHS",
    "BiRC2D",
    "Dataset",
    "FrozenCNN",
    "JointCNN",
    "LwF",
    "RandomConvSLDA",
    "ReservoirBank",
    "SmallCNN",
    "StreamingLDA",
    "Task",
    "__version__",
    "class_incremental_stream",
    "glyph_dataset",
    "load_dataset",
    "load_digits_dataset",
    "pool_map",
    "render_glyph",
]
