"""The live rules feature: fusion rules written in a notebook cell, added to the open app as new steps.

:class:`LiveRules` is the model of this feature over the one :class:`~workbench.ui.state.AppState`
(``state.rules``, the status line); it asks the controller to reload the fusion timeline when the
chains change. A participant's rule is untrusted code in a teaching room: :meth:`LiveRules.add_rule`
refuses in one line what is not a rule instance and a name a built-in step has, and the rule's
``match`` and ``rewrite`` run under :attr:`LiveRules.rule_time_limit_s` (``fusion/scheduler/``).
"""

from __future__ import annotations

from ...fusion import register_rule, unregister_rule
from ...fusion.scheduler import rule_time_limit, set_rule_time_limit
from .. import arguments as check


class LiveRules:
    """Add, remove and time-limit the rules of this session (``app.add_rule`` in notebook 06).

    Args:
        app: the controller: its ``state``, ``say``, ``look_at`` / ``looking_at`` (the step selected), ``loaded``
            and ``load``.
    """

    def __init__(self, app):
        self.app = app

    def add_rule(self, rule) -> None:
        """Add a fusion rule (an instance of a :class:`workbench.fusion.Rule` subclass) to the chains it names
        and show it as a new step.

        The loaded export's timeline runs again with the rule in its place (the steps before it come from
        the caches), and the new step is selected: its graph before and after, its parity, its reasons
        where it did not match. A rule of the same name is replaced, so editing the cell and adding it
        again shows the new version. Its ``match`` and ``rewrite`` run under :attr:`rule_time_limit_s`: a
        pass that takes longer (or raises) fails the step (its row says why) and the other steps go on.

        Raises:
            FusionError: not a rule instance (an object of another kind, or the rule class itself), the name
                of a built-in step, or no name, anchors or place in a chain.
        """
        app, s = self.app, self.app.state
        register_rule(rule)  # a wrong rule raises here, at the call, and changes nothing
        s.rules = tuple(n for n in s.rules if n != rule.name) + (rule.name,)
        if rule.name in s.disabled:
            s.set_step_enabled(rule.name, True)
        app.look_at(rule.name)  # the new step is the one to look at
        chains = ", ".join(rule.after)
        shown = s.engine if s.engine != "auto" else None
        if shown and shown not in rule.after:
            app.say(f"rule {rule.name} runs in the {chains} chain; the app shows the {shown} engine: choose "
                    f"engine {' or '.join(rule.after)} (or auto) to see it", "info")
        else:
            app.say(f"rule {rule.name} added to the {chains} chain after {', '.join(rule.after.values())}", "ok")
        if app.loaded:
            app.load()

    def remove_rule(self, name: str) -> None:
        """Take a rule added with :meth:`add_rule` out of the chains again and run the timeline without it.

        Raises:
            FusionError: no rule of that name was added (a built-in step is switched off instead).
        """
        app, s = self.app, self.app.state
        check.text("name", name)
        unregister_rule(name)  # no rule of that name: raises here, at the call, and changes nothing
        s.rules = tuple(n for n in s.rules if n != name)
        s.disabled = [d for d in s.disabled if d != name]
        if app.looking_at == name:
            app.look_at(None)
        if app.loaded:
            app.load()

    @property
    def rule_time_limit_s(self) -> float:
        """Seconds one pass of a rule (its ``match`` and ``rewrite`` over the graph) may take before its step fails."""
        return rule_time_limit()

    @rule_time_limit_s.setter
    def rule_time_limit_s(self, seconds: float) -> None:
        set_rule_time_limit(check.seconds("rule_time_limit_s", seconds, positive=True))
        if self.app.loaded and any(getattr(sn, "failed", "") for sn in self.app.state.snapshots):
            self.app.load()  # the failed steps run again under the new limit


__all__ = ["LiveRules"]
