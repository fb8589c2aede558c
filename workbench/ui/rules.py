"""The controller's rule actions: a fusion rule written in a notebook cell, added to the open app as a new step.

Part of :class:`~workbench.ui.controller.Controller` (a mixin, so the controller file stays short).
"""

from __future__ import annotations


class RuleActions:
    def add_rule(self, rule) -> None:
        """Add a fusion rule (a :class:`workbench.fusion.Rule`) to the chains it names and show it as a new step.

        The loaded export's timeline runs again with the rule in its place (the steps before it come from
        the caches), and the new step is selected: its graph before and after, its parity, its reasons
        where it did not match. A rule of the same name is replaced, so editing the cell and adding it
        again shows the new version.

        Its ``match`` and ``rewrite`` run under :attr:`rule_time_limit_s`: a pass that takes longer fails
        the step (its row says why) and the other steps go on.

        Raises:
            FusionError: not a rule instance (an object of another kind, or the rule class itself), the name
                of a built-in step, or no name, anchors or place in a chain.
        """
        from ..errors import FusionError
        from ..fusion import register_rule

        try:
            register_rule(rule)
        except FusionError as e:
            self.say(f"add_rule: {e}", "error")
            raise
        s = self.state
        s.rules = tuple(n for n in s.rules if n != rule.name) + (rule.name,)
        if rule.name in s.disabled:
            s.set_step_enabled(rule.name, True)
        self._chosen = rule.name  # the new step is the one to look at
        chains = ", ".join(rule.after)
        shown = s.engine if s.engine != "auto" else None
        if shown and shown not in rule.after:
            self.say(f"rule {rule.name} runs in the {chains} chain; the app shows the {shown} engine: choose "
                     f"engine {' or '.join(rule.after)} (or auto) to see it", "info")
        else:
            self.say(f"rule {rule.name} added to the {chains} chain after {', '.join(rule.after.values())}", "ok")
        if self.export_result is not None:
            self.load()

    def remove_rule(self, name: str) -> None:
        """Take a rule added with :meth:`add_rule` out of the chains again and run the timeline without it.

        Raises:
            FusionError: no rule of that name was added (a built-in step is switched off instead).
        """
        from ..errors import FusionError
        from ..fusion import unregister_rule

        try:
            unregister_rule(name)
        except FusionError as e:
            self.say(f"remove_rule: {e}", "error")
            raise
        s = self.state
        s.rules = tuple(n for n in s.rules if n != name)
        s.disabled = [d for d in s.disabled if d != name]
        if self._chosen == name:
            self._chosen = None
        if self.export_result is not None:
            self.load()

    @property
    def rule_time_limit_s(self) -> float:
        """Seconds one pass of a rule (its ``match`` and ``rewrite`` over the graph) may take before its step fails."""
        from ..fusion.scheduler import rule_time_limit

        return rule_time_limit()

    @rule_time_limit_s.setter
    def rule_time_limit_s(self, seconds: float) -> None:
        from ..fusion.scheduler import set_rule_time_limit

        set_rule_time_limit(seconds)
        if self.export_result is not None and any(getattr(sn, "failed", "") for sn in self.state.snapshots):
            self.load()  # the failed steps run again under the new limit
