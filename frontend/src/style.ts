// The stylesheet, injected as one <style> element (TensorBoard's CSP allows inline styles).
// System fonts only: nothing is fetched.
export const CSS = `
:root{--bg:#fff;--fg:#202124;--muted:#5f6368;--line:#dadce0;--panel:#f8f9fa;--accent:#f57c00;--accent2:#1976d2;--err:#c5221f;--errbg:#fce8e6;--sel:rgba(25,118,210,.18);--hover:rgba(0,0,0,.04);--track:#f1f3f4}
body.dark{--bg:#202124;--fg:#e8eaed;--muted:#9aa0a6;--line:#3c4043;--panel:#292a2d;--accent:#ffa726;--accent2:#8ab4f8;--err:#f28b82;--errbg:#3c1f1e;--sel:rgba(138,180,248,.25);--hover:rgba(255,255,255,.06);--track:#2d2e31}
html,body{margin:0;padding:0;background:var(--bg);color:var(--fg);font:13px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
#gs-app{display:flex;flex-direction:column;min-height:100vh}
.topbar{display:flex;flex-wrap:wrap;gap:8px 16px;align-items:center;padding:8px 12px;border-bottom:1px solid var(--line);background:var(--panel);position:sticky;top:0;z-index:5}
.brand{font-weight:600;color:var(--accent);margin-right:4px}
.topbar label{display:flex;gap:4px;align-items:center;color:var(--muted)}
a{color:var(--accent2)}
a.btn{text-decoration:none;border:1px solid var(--line);border-radius:4px;padding:1px 6px}
.data-table.mini{width:auto}.data-table.mini th{cursor:default;white-space:nowrap}.data-table.mini td{white-space:nowrap}
select,input,button{font:inherit;color:var(--fg);background:var(--bg);border:1px solid var(--line);border-radius:4px;padding:3px 6px}
select{max-width:260px}
button{cursor:pointer}button:disabled{opacity:.45;cursor:default}
.btn.small{padding:1px 6px;font-size:12px}
.tabs{display:flex;gap:2px;padding:0 12px;border-bottom:1px solid var(--line);overflow-x:auto}
.tab{border:none;border-bottom:2px solid transparent;border-radius:0;background:none;padding:8px 12px;color:var(--muted)}
.tab[aria-selected=true]{color:var(--fg);border-bottom-color:var(--accent);font-weight:600}
.progress{height:3px;position:relative;overflow:hidden;background:transparent}
.progress.on{background:var(--line)}
.progress.on::after{content:"";position:absolute;left:-30%;width:30%;height:100%;background:var(--accent);animation:gs-slide 1.1s linear infinite}
@keyframes gs-slide{to{left:100%}}
.progress.on.determinate::after{animation:none;left:0;width:calc(var(--done,0)*100%);transition:width .3s}
main{padding:12px;flex:1;min-width:0}
.banner{margin:8px 12px;padding:8px 12px;border-radius:4px;background:var(--errbg);color:var(--err);white-space:pre-wrap}
.banner.info{background:var(--panel);color:var(--muted)}
.file-progress .banner{margin:8px 12px 0}
.linkbox{display:flex;gap:8px;align-items:center}
.banner ul{margin:4px 0 0 16px;padding:0}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin-bottom:12px}
.card{background:var(--panel);border:1px solid var(--line);border-radius:6px;padding:10px 14px;min-width:220px;flex:1}
.card h3,.section h3,.table-box h3{margin:0 0 6px;font-size:14px}
.kv{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:0}
.kv dt{color:var(--muted)}.kv dd{margin:0;overflow-wrap:anywhere;overflow-x:auto;min-width:0}
.grid2{display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:12px;margin-bottom:12px}
.chart-box{margin:0;background:var(--panel);border:1px solid var(--line);border-radius:6px;padding:8px}
.chart-box figcaption{font-weight:600;margin-bottom:4px}
.chart{width:100%;height:auto;max-height:360px;display:block;user-select:none}
.chart .grid{stroke:var(--line);stroke-width:1}
.chart .axis{fill:var(--muted);font-size:11px}
.chart .bar:hover,.pie .slice:hover{opacity:.8}
.chart .selection{fill:var(--sel)}
.chart .peak-label{fill:var(--fg);font-size:11px;font-weight:600}
.chart.lanes{max-height:none}.chart .lane-box:hover{opacity:.8}.chart .lane-label{fill:#fff;font-size:10px;pointer-events:none}
.pie-row{display:flex;gap:12px;align-items:center}
.pie{width:200px;height:200px;flex:none}.pie-hole{fill:var(--panel)}
.legend{display:flex;flex-wrap:wrap;gap:4px 12px;font-size:12px;margin-top:4px}
.legend-col{flex-direction:column;flex-wrap:nowrap;min-width:0;flex:1}
.legend-item{display:flex;align-items:center;gap:4px;min-width:0}
.legend-name{overflow:hidden;text-overflow:ellipsis;white-space:nowrap;min-width:0}
.legend-val{color:var(--muted);flex:none}
.swatch{width:10px;height:10px;border-radius:2px;flex:none;display:inline-block}
.table-box{margin-bottom:12px}
.table-tools{display:flex;gap:8px;align-items:center;margin-bottom:4px}
.table-info{color:var(--muted);flex:1}
.cols{position:relative;font-size:12px}.cols summary{cursor:pointer;color:var(--accent2)}
.cols-list{position:absolute;right:0;z-index:4;background:var(--bg);border:1px solid var(--line);border-radius:4px;padding:6px 10px;display:flex;flex-direction:column;gap:2px;white-space:nowrap}
@media (max-width:1299px){.data-table td{max-width:260px}.data-table th,.data-table td{padding:3px 5px}}
.table-scroll{overflow:auto;max-height:70vh;border:1px solid var(--line);border-radius:4px}
.data-table{border-collapse:collapse;width:100%;font-size:12px}
.data-table th{position:sticky;top:0;background:var(--panel);text-align:left;padding:4px 8px;border-bottom:1px solid var(--line);white-space:normal;overflow-wrap:normal;vertical-align:bottom;cursor:pointer}
.data-table td.txt{max-width:none}.data-table td.wrap{min-width:220px;max-width:480px;white-space:normal}
.data-table .clip{display:block;white-space:nowrap;overflow:hidden;text-overflow:ellipsis;max-width:clamp(80px,8vw,320px)}
.data-table .clip.first{max-width:clamp(200px,22vw,640px)}
.data-table th[data-sort=desc]::after{content:" ▼"}.data-table th[data-sort=asc]::after{content:" ▲"}
.data-table td{padding:3px 8px;border-bottom:1px solid var(--line);max-width:520px;overflow-wrap:anywhere}
.data-table .num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.data-table th.num{white-space:normal}
.data-table tr.clickable{cursor:pointer}.data-table tr:hover td{background:var(--hover)}
.data-table tr.selected td{background:var(--sel)}
.data-table td.empty{color:var(--muted);text-align:center}
.pos{color:#d93025}.neg{color:#188038}
.toolbar{display:flex;flex-wrap:wrap;gap:8px;align-items:center;margin-bottom:8px}
.seg{display:inline-flex}.seg button{border-radius:0}.seg button:first-child{border-radius:4px 0 0 4px}.seg button:last-child{border-radius:0 4px 4px 0}
.seg button[aria-pressed=true]{background:var(--accent2);color:var(--bg)}
.stack{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px;white-space:pre-wrap;background:var(--panel);border:1px solid var(--line);padding:8px;border-radius:4px;max-height:320px;overflow:auto;margin:4px 0 12px}
.muted{color:var(--muted)}
.recs{margin:0;padding-left:18px}
.ledger td.fix{min-width:280px;max-width:640px}.ledger .advice{margin-top:2px;color:var(--muted)}
.ledger .reason{color:var(--muted);font-style:italic}.ledger tr.nothing td,.ledger tr.unmeasured td.num{color:var(--muted)}
.ledger td.rec{font-weight:600}
.diag-head{margin:0 0 12px;display:flex;flex-direction:column;gap:6px}
.caveats{background:var(--panel);border:1px solid var(--line);border-left:4px solid var(--accent);border-radius:4px;padding:6px 12px}
.caveats h3{margin:0 0 4px;font-size:13px}.caveats ul{margin:0;padding-left:18px}.caveats li{overflow-wrap:anywhere}
.caveats .tag{display:inline-block;margin-right:6px;padding:0 5px;border:1px solid var(--err);border-radius:3px;background:var(--errbg);color:var(--err);font-size:11px;font-weight:600}
.verdict{margin:0;padding:8px 12px;background:var(--panel);border:1px solid var(--line);border-left:4px solid var(--accent2);border-radius:4px;font-size:14px;overflow-wrap:anywhere}
.verdict[data-kind=pending]{color:var(--muted);font-size:13px}
.tl{display:flex;flex-direction:column;gap:6px}
.tl-wrap{position:relative;border:1px solid var(--line);border-radius:4px;height:60vh;min-height:160px;outline:none;overflow:hidden}
.tl-wrap:focus{border-color:var(--accent2)}
.tl-wrap canvas{position:absolute;left:0;top:0}
.tl-details{background:var(--panel);border:1px solid var(--line);border-radius:4px;padding:8px;min-height:40px}
.tl-help{color:var(--muted);font-size:12px}
.tl-keys{background:var(--panel);border:1px solid var(--line);border-radius:4px;padding:8px 12px;max-width:560px}
kbd{font:11px ui-monospace,monospace;border:1px solid var(--line);border-radius:3px;padding:0 4px;background:var(--bg)}
.icicle{margin-bottom:12px}
.ic-crumbs{font-size:12px;margin-bottom:4px;overflow-wrap:anywhere}
.ic-box{position:relative;overflow:hidden}
.ic-node{position:absolute;height:19px;box-sizing:border-box;border-right:1px solid var(--bg);font-size:11px;line-height:19px;color:#111;overflow:hidden;white-space:nowrap;text-overflow:ellipsis;padding:0 3px;cursor:pointer}
.ic-node:hover{filter:brightness(1.1)}
.tree{font-size:12px}.tree td:first-child{white-space:nowrap}
.tree .toggle{display:inline-block;width:14px;cursor:pointer;color:var(--muted)}
.heatmap .cell{cursor:pointer}.heatmap .cell:hover{stroke:var(--fg);stroke-width:1}
.heatmap .cell.selected{stroke:var(--fg);stroke-width:2}
.heat-scale{display:flex;align-items:center;gap:6px;font-size:12px;margin-top:4px}
.heat-bar{display:inline-block;width:180px;height:10px;border-radius:2px;border:1px solid var(--line)}
.chart .bar-group.hl rect{stroke:var(--fg);stroke-width:1}
.point-line .value-line{fill:none;stroke:var(--accent2);stroke-width:1.5}
.point-line .guide-line{fill:none;stroke:var(--muted);stroke-width:1;stroke-dasharray:4 3}
.point-line .pt{fill:var(--accent2);cursor:pointer}.point-line .pt.marked{fill:#d93025}
.point-line .pt.hl{stroke:var(--fg);stroke-width:2}
.history .regression{margin:0 0 12px;padding:8px 12px;background:var(--panel);border:1px solid var(--line);border-left:4px solid #d93025;border-radius:4px;overflow-wrap:anywhere}
.history .regression.none{border-left-color:var(--accent2)}
.history .regression h3{margin:0 0 4px;font-size:14px}.history .regression p{margin:4px 0}
.history .rule{margin:4px 0 12px;font-size:12px}.history .data-table td.wrap{min-width:120px}
.history .data-table .clip,.history .data-table .clip.first{max-width:clamp(110px,10vw,320px)}.history .data-table td.actions{white-space:nowrap}
.data-table tr.first-regression td{background:rgba(217,48,37,.16)}
body.dark .data-table tr.first-regression td{background:rgba(242,139,130,.22)}
.data-table tr.regressed td.num{color:#d93025}body.dark .data-table tr.regressed td.num{color:#f28b82}
`;
