"""The app's style sheet (one place), sent once with the app's title."""

CSS = """
<style>
.wb-app{font-family:var(--jp-ui-font-family,sans-serif)}
.wb-title{font-size:16px;font-weight:600}
.wb-status{font-size:12px;min-height:20px}
.wb-table table{border-collapse:collapse;font-size:12px}
.wb-table td,.wb-table th{border:1px solid #ddd;padding:1px 6px;text-align:right}
.wb-table th{background:#f3f3f3}.wb-table td:first-child,.wb-table th:first-child{text-align:left}
.wb-up{color:#1a7f37;font-weight:600}.wb-down{color:#cf222e;font-weight:600}
.wb-badge{display:inline-block;border-radius:8px;padding:0 6px;margin:1px;font-size:11px;color:white}
.wb-ok{background:#1a7f37}.wb-bad{background:#cf222e}.wb-none{background:#999}
.wb-timeline td,.wb-timeline th{padding:0 5px!important;line-height:1.5}
.wb-timeline td:nth-child(2),.wb-timeline th:nth-child(2),.wb-timeline td:nth-child(4){text-align:left!important}
.wb-sub{font-size:11px;color:#666;margin-top:4px;text-transform:uppercase;letter-spacing:.04em}
.wb-section{font-weight:600;font-size:13px;margin-top:6px;border-bottom:1px solid #ddd}
.wb-engine-note{font-size:12px;color:#444}
.wb-rows{border:1px solid #e3e3e3;border-radius:4px;padding:2px 0;max-height:480px;overflow-y:auto}
.wb-rows .widget-html,.wb-rows .widget-checkbox,.wb-rows .widget-button{min-height:0!important;height:auto!important;margin:0!important}
.wb-rows .widget-html-content{line-height:18px}
.wb-row{align-items:flex-start;padding:1px 4px;border-bottom:1px solid #f2f2f2}
.wb-row:hover{background:#f7f9fc}
.wb-row.wb-row-sel{background:#e8f0fe}
.wb-row.wb-row-sel .wb-row-name{font-weight:600}
.wb-row .widget-checkbox input{margin:3px 0 0 0}
button.wb-row-name{background:transparent!important;box-shadow:none!important;border:none!important;
  text-align:left!important;justify-content:flex-start!important;padding:0 4px!important;height:20px!important;
  line-height:20px!important;font-size:12px!important;color:#1f2328}
button.wb-row-name:hover{text-decoration:underline}
.wb-row.wb-row-off button.wb-row-name{color:#8c959f;text-decoration:line-through}
.wb-cells{display:flex;font-size:12px;gap:6px}
.wb-cells .wb-n{width:44px;text-align:right;color:#333}
.wb-cells .wb-h{width:120px;color:#1a7f37;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.wb-cells .wb-p{width:56px}
.wb-why{font-size:11px;color:#9a6700;line-height:14px;white-space:normal;max-width:520px;display:-webkit-box;
  -webkit-line-clamp:2;-webkit-box-orient:vertical;overflow:hidden}
.wb-head{font-size:11px;color:#666;display:flex;gap:6px;padding:0 4px}
.wb-graphs{display:flex;flex-flow:row wrap;gap:8px}
.wb-ans{width:120px;color:#444;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.wb-prov,.wb-buys{color:#555;font-size:11px;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.wb-sweep table td{font-size:11px}
</style>
"""

__all__ = ["CSS"]
