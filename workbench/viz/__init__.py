"""Pure drawing functions: layouts and results in, plotly figures out.

Nothing here computes a fusion or a timing; :mod:`workbench.viz.netron`
manages the one side server the tool starts (Netron, for full detail).
"""
