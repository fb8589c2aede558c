"""The text feature: answers checked on real sentences, per fusion step and for int8 / fp16.

:class:`TextAnswers` writes ``state.sentences``, ``state.text_line`` and ``state.answers`` of the one
:class:`~workbench.ui.state.AppState` (and the controller's ``text``, the batches every measurement then uses);
its work runs in the job runner's measure lane (:data:`~workbench.ui.measuring.feature.MEASURE_LANE`).
"""

from __future__ import annotations

from ...measure.variants.answers import PRECISIONS, task_answers
from ...ort.task_parity import MIN_DISTINCT
from ...text import text_batches
from .. import arguments as check
from ..jobs import Job
from ..measuring.feature import MEASURE_LANE

#: The precisions whose answers ``use_text`` checks unless told otherwise.
DEFAULT_PRECISIONS = ("int8", "fp16")


class TextAnswers:
    """``use_text``.

    Args:
        app: the controller: its ``state``, ``export_result``, ``timeline``, ``runner``, ``parity``, ``say`` and
            ``bump_generation``.
    """

    def __init__(self, app):
        self.app = app

    def use_text(self, sentences: list[str] | str | None = None, *,
                 precisions: tuple[str, ...] = DEFAULT_PRECISIONS) -> None:
        """Check answers on real text: the sentences (a list, text with one per line, or None for the
        built-in set) are tokenized with the model's tokenizer; every step's parity then includes its
        task parity, and int8 / fp16 are checked against the unfused export (``state.answers``).

        Sentences that are not strings, an empty one, fewer than three different ones (a similarity ranking of
        fewer means nothing), or a precision not in :data:`~workbench.measure.variants.answers.PRECISIONS` raise.
        """
        app = self.app
        sentences = check.sentences("sentences", sentences, MIN_DISTINCT)
        picked = check.names("precisions", precisions, PRECISIONS, what="precision", empty_ok=True)
        precisions = DEFAULT_PRECISIONS if picked is None else tuple(picked)
        if app.timeline is None or app.export_result is None:
            app.say("load a model first", "error")
            return
        s = app.state

        def work(job: Job) -> None:
            src = app.export_result.source
            job.progress(f"tokenizing with {src.name}'s tokenizer", 0.05)
            text = text_batches(src, sentences)
            d = text.describe()
            app.text = text
            with s.hold_trait_notifications():
                s.sentences = tuple(text.sentences)
                s.text_line = (f"{d['sentences']} sentences in {d['batches']} batches (lengths "
                               f"{', '.join(f'{k}×{v}' for k, v in d['bucket_mix'].items())}; "
                               f"{d['padding_share'] * 100:.0f}% padding); check: {d['kind']}")
                s.answers = ()
            app.timeline.use_text(text)
            app.bump_generation()
            job.progress("task parity of every step", 0.1)
            app.parity.run_pass(job, False)
            if precisions:
                job.progress(f"answers of {', '.join(precisions)} against the unfused export", 0.6)
                res = task_answers(src, plan=app.timeline.plan, precisions=precisions, text=text,
                                   progress=lambda stage, f: job.progress(f"answers: {stage}", 0.6 + 0.4 * f))
                s.answers = tuple({"name": k, **v} for k, v in res["precisions"].items())
            app.say("answers checked on the text: see the answers column and the precision rows", "ok")

        app.runner.start("answers", work, lane=MEASURE_LANE)


__all__ = ["TextAnswers"]
