// The collective grid: one row per (rank, process group), one column per schedule
// position, drawn on a canvas (only what is on screen, on every scroll) from the data the
// page embeds. Nothing here requests anything: the page's policy forbids it.
(() => {
  "use strict";

  const data = JSON.parse(document.getElementById("fr-data").textContent);
  const G = data.grid;
  const rows = G.rows, cols = G.columns, cells = G.cells;
  const nCells = cells.row.length;

  // --- colours: hue by op, shade by call site --------------------------------------
  const OP_HUES = {
    all_reduce: 212, allreduce: 212, all_reduce_coalesced: 200, reduce: 190,
    all_gather: 28, all_gather_into_tensor: 28, _all_gather_base: 28, allgather: 28,
    all_gather_coalesced: 20, gather: 45,
    reduce_scatter: 120, reduce_scatter_tensor: 120, _reduce_scatter_base: 120,
    scatter: 145, broadcast: 285, all_to_all: 170, all_to_all_single: 170,
    alltoall: 170, alltoall_base: 170, barrier: 250, send: 330, recv: 48, coalesced: 0,
  };
  const SHADES = [[62, 52], [55, 70], [70, 38], [45, 80], [80, 30], [35, 60]];
  function opHue(op) {
    if (op in OP_HUES) return OP_HUES[op];
    let h = 0;
    for (let i = 0; i < op.length; i++) h = (h * 31 + op.charCodeAt(i)) % 360;
    return h;
  }
  function colour(op, s, l) {
    // a coalesced batch's trailer is bookkeeping, not an op: grey, never the culprit's red
    return op === "coalesced" ? `hsl(0, 0%, ${Math.min(l + 15, 85)}%)` : `hsl(${opHue(op)}, ${s}%, ${l}%)`;
  }
  const styleOf = new Uint16Array(nCells);
  const styles = [];           // {op, site, color}
  const styleIds = new Map();  // "op\0site" -> style index
  const shadesPerOp = new Map();
  for (let i = 0; i < nCells; i++) {
    const sig = G.signatures[cells.sig[i]] || {};
    const op = sig.op || "?";
    const site = (G.stacks[cells.stack[i]] || {}).site || "";
    const key = op + "\u0000" + site;
    let id = styleIds.get(key);
    if (id === undefined) {
      const k = shadesPerOp.get(op) || 0;
      shadesPerOp.set(op, k + 1);
      const [s, l] = SHADES[k % SHADES.length];
      id = styles.length;
      styles.push({op, site, color: colour(op, s, l)});
      styleIds.set(key, id);
    }
    styleOf[i] = id;
  }
  const ABSENT = {
    other: "#fafafa",      // the row's group has no such column
    missing: "#ffd9d9",    // its peers issued it, this rank did not
    wrapped: "#e3e3e3",    // older than what this rank's buffer still holds
    nodump: "#b9b9b9",     // the rank's dump is missing: unknown
  };

  // --- views -------------------------------------------------------------------------
  const groupDesc = G.groups.map(g => g.desc);
  const descOrder = [];
  for (const d of cols.desc) if (!descOrder.includes(d)) descOrder.push(d);
  for (const d of groupDesc) if (!descOrder.includes(d)) descOrder.push(d);
  function makeView(id, label, desc, rowFilter, colFilter) {
    const vr = [], vc = [];
    for (let r = 0; r < rows.rank.length; r++) if (rowFilter(r)) vr.push(r);
    for (let c = 0; c < cols.desc.length; c++) if (colFilter(c)) vc.push(c);
    return {id, label, desc, rows: vr, cols: vc, at: null, rowPos: null, colPos: null};
  }
  const views = [];
  for (const d of descOrder) {
    const n = G.groups.filter(g => g.desc === d).length;
    views.push(makeView("group:" + d, `${d}: one row per rank` + (n > 1 ? ` (${n} groups)` : ""), d,
      r => groupDesc[rows.group[r]] === d, c => cols.desc[c] === d));
  }
  views.push(makeView("all", "all groups: rank × group", null, () => true, () => true));
  function index(view) {
    if (view.at) return view;
    const nr = view.rows.length, nc = view.cols.length;
    view.rowPos = new Int32Array(rows.rank.length).fill(-1);
    view.colPos = new Int32Array(cols.desc.length).fill(-1);
    view.rows.forEach((r, i) => { view.rowPos[r] = i; });
    view.cols.forEach((c, i) => { view.colPos[c] = i; });
    view.at = new Int32Array(nr * nc).fill(-1);
    for (let i = 0; i < nCells; i++) {
      const r = view.rowPos[cells.row[i]], c = view.colPos[cells.col[i]];
      if (r >= 0 && c >= 0) view.at[r * nc + c] = i;
    }
    return view;
  }

  // --- state -------------------------------------------------------------------------
  const canvas = document.getElementById("grid");
  const ctx = canvas.getContext("2d");
  const scroll = document.getElementById("grid-scroll");
  const wrap = document.getElementById("grid-wrap");
  const spacer = document.getElementById("grid-spacer");
  const tooltip = document.getElementById("tooltip");
  const viewSelect = document.getElementById("view");
  const zoomSelect = document.getElementById("zoom");
  const LABEL_W = 190, HEADER_H = 46;
  let view = null, cw = 14, ch = 14;
  let finding = data.root_cause;          // the finding whose cells are marked
  let selected = -1;                      // the clicked cell
  let frame = null;                       // what the last draw showed (for tests and tools)
  let pending = false;

  function findingOf(i) { return i === null || i === undefined ? null : data.findings[i]; }
  // where each finding shows in the grid, worked out when the page was made
  function located(i) { return i === null || i === undefined ? null : G.findings[i]; }
  function absentKind(r, c) {
    const g = rows.group[r];
    if (cols.desc[c] !== groupDesc[g] || cols.p2p[c]) return "other";
    if (!rows.dumped[r]) return "nodump";
    const first = rows.first[r];
    if (first !== null && cols.seq[c] < first) return "wrapped";
    return "missing";
  }

  // --- drawing -----------------------------------------------------------------------
  function setZoom() {
    const mode = zoomSelect.value;
    const nr = view.rows.length, nc = view.cols.length;
    const compact = mode === "compact" || (mode === "auto" && nr > 160);
    // narrow grids get wider cells, up to filling the width
    const room = Math.floor((wrap.clientWidth - LABEL_W - 20) / Math.max(nc, 1));
    if (compact) {
      cw = mode === "auto" ? Math.max(7, Math.min(36, room)) : 7;
      ch = 4;
    } else {
      cw = mode === "auto" ? Math.max(14, Math.min(36, room)) : 14;
      ch = mode === "auto" && nr <= 64 ? 22 : 14;
    }
    spacer.style.width = (LABEL_W + nc * cw) + "px";
    spacer.style.height = (HEADER_H + nr * ch) + "px";
    // no taller than its rows (plus a scrollbar), no taller than most of the window
    const want = HEADER_H + nr * ch + 24;
    wrap.style.height = Math.max(160, Math.min(want, Math.round(window.innerHeight * 0.7))) + "px";
  }
  function schedule() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; draw(); });
  }
  function label(r) {
    const g = G.groups[rows.group[r]];
    return view.id === "all" || G.groups.filter(x => x.desc === g.desc).length > 1
      ? `rank ${rows.rank[r]} · ${g.desc} (pg ${g.name})` : `rank ${rows.rank[r]}`;
  }
  // Row labels are laid out, never stacked: a label is LINE_H tall, and a row gets one
  // only where it overlaps no other. The culprits' come first, one per run of culprit rows
  // closer than a label's height (it names them all); then the waiting ranks' (blocked
  // behind the cause, not at fault), the same way, where they overlap no culprit's; then
  // every n-th row's, n rows being at least a label's height, except where one of those is.
  const LINE_H = 14;
  // the waiting ranks' style: amber, never the culprits' red
  const WAIT = {mark: "#e08a00", band: "#fff1d6", text: "#8a5300"};
  function rowText(r) { return label(r) + (rows.dumped[r] ? "" : " (no dump)"); }
  function runText(run, waiting) {
    const mark = waiting ? "◇ " : "▶ ", tail = waiting ? " · waiting" : "";
    if (run.length === 1) return mark + rowText(run[0]) + tail;
    const ranks = [...new Set(run.map(r => rows.rank[r]))];
    if (ranks.length === 1) return `${mark}rank ${ranks[0]} (${run.length} rows)${tail}`;
    if (ranks.length <= 3) return `${mark}ranks ${ranks.join(", ")}${tail}`;
    return `${mark}ranks ${ranks[0]} … ${ranks[ranks.length - 1]} (${run.length} rows)${tail}`;
  }
  function drawLabels(r0, r1, sy, culpritRows, waitingRows) {
    const drawn = [];
    const centre = vr => HEADER_H + vr * ch - sy + ch / 2;
    function runsOf(marked) {
      const runs = [];
      for (let vr = r0; vr < r1; vr++) {
        const r = view.rows[vr];
        if (!marked.has(r)) continue;
        const last = runs[runs.length - 1];
        if (last && centre(vr) - last.y1 < LINE_H) { last.rows.push(r); last.y1 = centre(vr); }
        else runs.push({rows: [r], y0: centre(vr), y1: centre(vr)});
      }
      // runs' centres: at least a label apart, as a run ends a label's height before the next
      for (const run of runs) run.y = (run.y0 + run.y1) / 2;
      for (let k = 1; k < runs.length; k++) runs[k].y = Math.max(runs[k].y, runs[k - 1].y + LINE_H);
      return runs;
    }
    const runs = runsOf(culpritRows);
    const waitRuns = runsOf(waitingRows).filter(w => !runs.some(run => Math.abs(run.y - w.y) < LINE_H));
    const taken = [...runs, ...waitRuns];
    ctx.textBaseline = "middle";
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillStyle = "#333";
    const every = Math.ceil(LINE_H / ch);
    for (let vr = r0 - (r0 % every); vr < r1; vr += every) {
      const r = view.rows[vr];
      if (r === undefined || culpritRows.has(r) || waitingRows.has(r)) continue;
      const y = centre(vr);
      if (taken.some(run => Math.abs(run.y - y) < LINE_H)) continue;
      const text = rowText(r);
      ctx.fillText(text, 6, y, LABEL_W - 18);
      const ink = ctx.measureText(text);
      drawn.push({text, y, top: y - ink.actualBoundingBoxAscent, bottom: y + ink.actualBoundingBoxDescent,
        culprit: false, waiting: false, ranks: [rows.rank[r]]});
    }
    // the waiting ranks' and the culprits' last, on bands of their own
    ctx.font = "bold 11px system-ui, sans-serif";
    for (const [list, waiting] of [[waitRuns, true], [runs, false]]) {
      for (const run of list) {
        const text = runText(run.rows, waiting);
        ctx.fillStyle = waiting ? WAIT.band : "#fde8e8";
        ctx.fillRect(0, run.y - LINE_H / 2, LABEL_W - 7, LINE_H);
        ctx.fillStyle = waiting ? WAIT.text : "#d62728";
        ctx.fillText(text, 6, run.y, LABEL_W - 18);
        drawn.push({text, y: run.y, top: run.y - LINE_H / 2, bottom: run.y + LINE_H / 2,
          culprit: !waiting, waiting, ranks: [...new Set(run.rows.map(r => rows.rank[r]))]});
      }
    }
    return drawn;
  }
  function draw() {
    const W = scroll.clientWidth, H = scroll.clientHeight;
    const dpr = window.devicePixelRatio || 1;
    if (canvas.width !== Math.round(W * dpr) || canvas.height !== Math.round(H * dpr)) {
      canvas.width = Math.round(W * dpr);
      canvas.height = Math.round(H * dpr);
      canvas.style.width = W + "px";
      canvas.style.height = H + "px";
    }
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, W, H);
    const sx = scroll.scrollLeft, sy = scroll.scrollTop;
    const nr = view.rows.length, nc = view.cols.length;
    const c0 = Math.max(0, Math.floor(sx / cw)), c1 = Math.min(nc, Math.ceil((sx + W - LABEL_W) / cw) + 1);
    const r0 = Math.max(0, Math.floor(sy / ch)), r1 = Math.min(nr, Math.ceil((sy + H - HEADER_H) / ch) + 1);
    const f = findingOf(finding), loc = located(finding);
    const focus = loc && loc.col !== null ? view.colPos[loc.col] : -1;
    const culpritRows = new Set(loc ? loc.rows : []);
    const waitingRows = new Set(loc ? loc.waiting_rows || [] : []);
    const marks = [], waitingMarks = [];
    let drawnCells = 0;
    const gap = cw > 8 ? 1 : 0, vgap = ch > 8 ? 1 : 0;
    for (let vr = r0; vr < r1; vr++) {
      const r = view.rows[vr];
      const y = HEADER_H + vr * ch - sy;
      for (let vc = c0; vc < c1; vc++) {
        const x = LABEL_W + vc * cw - sx;
        const i = view.at[vr * nc + vc];
        if (i >= 0) {
          ctx.fillStyle = styles[styleOf[i]].color;
          ctx.fillRect(x, y, cw - gap, ch - vgap);
          drawnCells++;
          if (cells.state[i] !== 0) {
            // in flight: a dark lower-right half, visible down a whole column at a glance
            ctx.fillStyle = "rgba(0,0,0,0.7)";
            ctx.beginPath();
            ctx.moveTo(x + cw - gap, y);
            ctx.lineTo(x + cw - gap, y + ch - vgap);
            ctx.lineTo(x, y + ch - vgap);
            ctx.fill();
          }
        } else {
          const kind = absentKind(r, view.cols[vc]);
          if (kind === "other") continue;
          ctx.fillStyle = ABSENT[kind];
          ctx.fillRect(x, y, cw - gap, ch - vgap);
          if ((kind === "missing" || kind === "nodump") && cw > 6) {
            // missing: a red stroke; no dump: a white one (unlike a grey coalesced cell)
            ctx.strokeStyle = kind === "missing" ? "#d62728" : "#ffffff";
            ctx.lineWidth = 1.5;
            ctx.beginPath();
            ctx.moveTo(x + 2, y + 2);
            ctx.lineTo(x + cw - gap - 2, y + ch - vgap - 2);
            ctx.stroke();
          }
        }
      }
    }
    // row labels, over the cells that scrolled under them
    ctx.fillStyle = "#f6f6f8";
    ctx.fillRect(0, HEADER_H, LABEL_W, H - HEADER_H);
    for (let vr = r0; vr < r1; vr++) {
      const r = view.rows[vr];
      const y = HEADER_H + vr * ch - sy;
      if (culpritRows.has(r) || waitingRows.has(r)) {
        ctx.fillStyle = culpritRows.has(r) ? "#d62728" : WAIT.mark;
        ctx.fillRect(LABEL_W - 6, y, 5, Math.max(ch - vgap, 2));
      }
      if (!rows.dumped[r]) {
        ctx.fillStyle = "#b9b9b9";
        ctx.fillRect(LABEL_W - 12, y, 5, Math.max(ch - vgap, 2));
      }
    }
    const labels = drawLabels(r0, r1, sy, culpritRows, waitingRows);
    // column header: group band, sequence numbers, the divergence marker
    ctx.fillStyle = "#f6f6f8";
    ctx.fillRect(0, 0, W, HEADER_H);
    const step = Math.max(1, Math.ceil(34 / cw));
    ctx.font = "10px system-ui, sans-serif";
    for (let vc = c0; vc < c1; vc++) {
      const c = view.cols[vc];
      const x = LABEL_W + vc * cw - sx;
      ctx.fillStyle = `hsl(${(descOrder.indexOf(cols.desc[c]) * 67) % 360}, 25%, ${cols.p2p[c] ? 85 : 70}%)`;
      ctx.fillRect(x, HEADER_H - 8, cw - gap, 6);
      if (vc % step === 0 || vc === focus) {
        ctx.fillStyle = vc === focus ? "#d62728" : "#555";
        ctx.fillText(cols.p2p[c] ? `p2p` : `#${cols.seq[c]}`, x, HEADER_H - 16);
      }
    }
    if (focus >= c0 && focus < c1) {
      ctx.fillStyle = "#d62728";
      ctx.font = "bold 11px system-ui, sans-serif";
      ctx.fillText("first divergence ▼", Math.max(LABEL_W, LABEL_W + focus * cw - sx - 40), 10);
    }
    // drawn last, over labels and header, so that an outline on the first row or column
    // shows whole; clipped to the cells' area (plus the outline's width)
    ctx.save();
    ctx.beginPath();
    ctx.rect(LABEL_W - 3, HEADER_H - 3, W, H);
    ctx.clip();
    // the selected finding's cells (or the gaps where they are missing): a thick outline,
    // red for the culprits', amber for those of ranks that only wait behind the cause
    // (drawn first: a culprit's outline is never covered)
    if (loc) {
      for (const [list, found, colour] of [[loc.waiting_marks || [], waitingMarks, WAIT.mark],
        [loc.marks, marks, "#d62728"]]) {
        for (const [row, col] of list) {
          const vr = view.rowPos[row], vc = view.colPos[col];
          if (vr < 0 || vc < 0) continue;
          found.push({row, col, rank: rows.rank[row], group: G.groups[rows.group[row]].name,
            column: cols.p2p[col] ? "p2p" : cols.seq[col]});
          if (vr < r0 || vr >= r1 || vc < c0 || vc >= c1) continue;
          ctx.strokeStyle = colour;
          ctx.lineWidth = 3;
          ctx.strokeRect(LABEL_W + vc * cw - sx - 1, HEADER_H + vr * ch - sy - 1, cw + 1, ch + 1);
        }
      }
    }
    // the first divergence: a line down the grid, left of its column
    if (focus >= 0) {
      const x = LABEL_W + focus * cw - sx - 2;
      if (x >= LABEL_W - 2 && x <= W) {
        ctx.fillStyle = "#d62728";
        ctx.fillRect(x - 1, HEADER_H, 2, Math.min(H, HEADER_H + nr * ch - sy) - HEADER_H);
      }
    }
    if (selected >= 0) {
      const vr = view.rowPos[cells.row[selected]], vc = view.colPos[cells.col[selected]];
      if (vr >= 0 && vc >= 0) {
        ctx.strokeStyle = "#1f4fff";
        ctx.lineWidth = 2;
        ctx.strokeRect(LABEL_W + vc * cw - sx - 1, HEADER_H + vr * ch - sy - 1, cw + 1, ch + 1);
      }
    }
    ctx.restore();
    ctx.fillStyle = "#e9e9ee";
    ctx.fillRect(0, 0, LABEL_W, HEADER_H);
    ctx.fillStyle = "#333";
    ctx.font = "11px system-ui, sans-serif";
    const header = `${nr} rows × ${nc} columns`;
    ctx.fillText(header, 6, 14);
    ctx.fillText("schedule order →", 6, 32);
    frame = {view: view.id, rows: nr, cols: nc, header, drawnCells, focusColumn: focus, culpritMarks: marks,
      culpritRows: [...culpritRows].filter(r => view.rowPos[r] >= 0).map(r => rows.rank[r]),
      waitingMarks, waitingRows: [...waitingRows].filter(r => view.rowPos[r] >= 0).map(r => rows.rank[r]),
      divergenceLine: focus >= 0, finding: f ? finding : null, rowHeight: ch, columnWidth: cw,
      // the columns on screen, wholly or in part (view indexes)
      firstColumn: Math.min(nc - 1, Math.floor(sx / cw)),
      lastColumn: Math.min(nc - 1, Math.floor((sx + W - LABEL_W - 1) / cw)),
      labels: labels.filter(l => l.bottom > HEADER_H && l.top < H)};
  }

  // --- interaction -------------------------------------------------------------------
  function cellUnder(event) {
    const box = scroll.getBoundingClientRect();
    const x = event.clientX - box.left, y = event.clientY - box.top;
    if (x < LABEL_W || y < HEADER_H) return null;
    const vc = Math.floor((x - LABEL_W + scroll.scrollLeft) / cw);
    const vr = Math.floor((y - HEADER_H + scroll.scrollTop) / ch);
    if (vr < 0 || vc < 0 || vr >= view.rows.length || vc >= view.cols.length) return null;
    return {vr, vc, x, y, i: view.at[vr * view.cols.length + vc]};
  }
  function fmtSizes(sizes) { return sizes ? JSON.stringify(sizes) : "?"; }
  function fmtTime(us) {
    if (us === null || us === undefined) return "—";
    const ms = us / 1000;
    const abs = new Date(Math.floor((G.t0_ns / 1e6) + ms)).toISOString();
    return `${abs} (+${ms.toFixed(3)} ms)`;
  }
  function describe(i) {
    const sig = G.signatures[cells.sig[i]] || {};
    const stack = G.stacks[cells.stack[i]] || {};
    const col = cells.col[i], r = cells.row[i];
    const g = G.groups[rows.group[r]];
    return {
      rank: rows.rank[r], group: `${g.desc} (pg ${g.name}, ${g.size} ranks)`,
      op: sig.op || "?", position: cols.p2p[col] ? `p2p after #${cols.seq[col]}` : `#${cols.seq[col]}`,
      state: G.states[cells.state[i]], record: cells.record[i],
      inputs: `${fmtSizes(sig.input_sizes)} ${(sig.input_dtypes || []).join(",")}`,
      outputs: `${fmtSizes(sig.output_sizes)} ${(sig.output_dtypes || []).join(",")}`,
      created: fmtTime(cells.created_us[i]), done: fmtTime(cells.done_us[i]),
      site: stack.site || "—", frames: stack.frames || [],
    };
  }
  function absentText(r, c) {
    const kind = absentKind(r, c);
    const who = `rank ${rows.rank[r]}, ${cols.desc[c]} ${cols.p2p[c] ? "p2p" : "#" + cols.seq[c]}`;
    return {
      missing: `${who}: never issued here (its peers did)`,
      wrapped: `${who}: older than this rank's buffer`,
      nodump: `${who}: unknown (no dump from this rank)`,
      other: "",
    }[kind];
  }
  // the tooltip describes the cell under the pointer: once the grid moves under it (a
  // scroll, another view, other row heights) it is gone until the pointer moves again
  // (a scroll event comes a frame late: one from before the tooltip showed is no move)
  let tooltipAt = null;
  function hideTooltip() { tooltip.hidden = true; }
  scroll.addEventListener("scroll", () => {
    if (!tooltipAt || tooltipAt[0] !== scroll.scrollLeft || tooltipAt[1] !== scroll.scrollTop) hideTooltip();
    schedule();
  });
  window.addEventListener("resize", () => { hideTooltip(); setZoom(); schedule(); });
  scroll.addEventListener("mousemove", event => {
    const hit = cellUnder(event);
    if (!hit) { tooltip.hidden = true; return; }
    let text;
    if (hit.i >= 0) {
      const d = describe(hit.i);
      text = `rank ${d.rank} · ${d.op} ${d.position} · ${d.state}\n${d.group}\nin ${d.inputs}\nat ${d.site}`;
    } else {
      text = absentText(view.rows[hit.vr], view.cols[hit.vc]);
    }
    if (!text) { tooltip.hidden = true; return; }
    tooltip.textContent = text;
    tooltip.hidden = false;
    tooltipAt = [scroll.scrollLeft, scroll.scrollTop];
    const left = Math.min(hit.x + 14, scroll.clientWidth - 300);
    tooltip.style.left = Math.max(0, left) + "px";
    tooltip.style.top = (hit.y + 14) + "px";
  });
  scroll.addEventListener("mouseleave", () => { tooltip.hidden = true; });
  scroll.addEventListener("click", event => {
    const hit = cellUnder(event);
    if (!hit || hit.i < 0) return;
    select(hit.i);
  });

  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined) node.textContent = text;
    if (cls) node.className = cls;
    return node;
  }
  function traceLink(i) {
    if (!data.trace_url || !cells.trace) return null;
    const url = data.trace_url.split("{trace_id}").join(G.traces[cells.trace[i]])
      .split("{span_id}").join(cells.span ? cells.span[i] : "");
    const a = el("a", "open its trace");
    a.href = url;
    a.target = "_blank";
    a.rel = "noopener noreferrer";
    a.id = "trace-link";
    return a;
  }
  function select(i) {
    selected = i;
    const d = describe(i);
    const body = document.getElementById("details-body");
    body.replaceChildren();
    const table = el("table");
    for (const [k, v] of [["rank", d.rank], ["group", d.group], ["op", d.op], ["position", d.position],
      ["state", d.state], ["record id", d.record], ["inputs", d.inputs], ["outputs", d.outputs],
      ["created", d.created], ["completed", d.done], ["call site", d.site]]) {
      const tr = el("tr");
      tr.append(el("th", k), el("td", String(v)));
      table.append(tr);
    }
    body.append(table);
    const link = traceLink(i);
    if (link) {
      const para = el("p");
      para.append(link);
      body.append(para);
    }
    body.append(el("h3", "stack (innermost first)"));
    const list = el("ol", undefined, "frames");
    for (const fr of d.frames) {
      const lib = /(site-packages|dist-packages)\/|\/torch\/|<frozen /.test(fr.filename || "");
      list.append(el("li", `${fr.name} at ${fr.filename}:${fr.line}`, lib ? "library" : ""));
    }
    if (!d.frames.length) list.append(el("li", "no stack in this dump"));
    body.append(list);
    schedule();
  }

  function setView(id) {
    const next = views.find(v => v.id === id);
    if (!next) return false;
    view = index(next);
    viewSelect.value = id;
    hideTooltip();
    setZoom();
    showNote();
    schedule();
    return true;
  }
  function scrollTo(vr, vc) {
    const W = scroll.clientWidth, H = scroll.clientHeight;
    if (vc >= 0) scroll.scrollLeft = Math.max(0, vc * cw - (W - LABEL_W) * 0.6);
    if (vr >= 0) scroll.scrollTop = Math.max(0, vr * ch - (H - HEADER_H) / 3);
  }
  // where a view opens: at the selected finding's cells where it has them, else at the
  // newest columns (the end of the window, where a hang shows), from the first row
  function reveal() {
    const loc = located(finding);
    const vc = loc && loc.col !== null ? view.colPos[loc.col] : -1;
    const candidates = loc ? [...loc.marks.map(m => m[0]), ...loc.rows,
      ...(loc.waiting_marks || []).map(m => m[0]), ...(loc.waiting_rows || [])] : [];
    const row = candidates.find(r => view.rowPos[r] >= 0);
    const vr = row === undefined ? -1 : view.rowPos[row];
    scrollTo(vr, vc);
    if (vc < 0) scroll.scrollLeft = scroll.scrollWidth;
    if (vr < 0) scroll.scrollTop = 0;
  }
  function selectFinding(i) {
    const f = findingOf(i);
    if (!f) return false;
    finding = i;
    setView("group:" + f.desc) || setView("all");
    reveal();
    document.querySelectorAll("a.finding").forEach(a => {
      a.classList.toggle("selected", Number(a.dataset.finding) === i);
    });
    schedule();
    return true;
  }
  document.querySelectorAll("a.finding").forEach(a => {
    a.addEventListener("click", () => selectFinding(Number(a.dataset.finding)));
  });
  for (const v of views) viewSelect.append(new Option(v.label, v.id));
  viewSelect.addEventListener("change", () => { if (setView(viewSelect.value)) reveal(); });
  zoomSelect.addEventListener("change", () => { hideTooltip(); setZoom(); reveal(); schedule(); });

  // --- legend and window note ----------------------------------------------------------
  const legend = document.getElementById("legend");
  const ops = [...new Set(styles.map(s => s.op))];
  for (const op of ops) {
    const item = el("span");
    const sw = el("span", undefined, "swatch");
    sw.style.background = colour(op, 62, 52);
    item.append(sw, op);
    legend.append(item);
  }
  for (const [name, colour, text] of [["inflight", null, "in flight (never completed)"],
    ["missing", ABSENT.missing, "missing: peers issued it"], ["wrapped", ABSENT.wrapped, "older than the buffer"],
    ["nodump", ABSENT.nodump, "no dump"]]) {
    const item = el("span");
    const sw = el("span", undefined, "swatch");
    sw.style.background = colour || "linear-gradient(135deg, #9ab 50%, #222 50%)";
    if (name === "nodump") sw.style.background = `linear-gradient(45deg, ${colour} 45%, #fff 45% 55%, ${colour} 55%)`;
    if (name === "missing") sw.style.borderColor = "#d62728";
    item.append(sw, text);
    legend.append(item);
  }
  // the selected finding's outlines: who is at fault, who only waits behind the cause
  for (const [name, colour, text] of [["culprit", "#d62728", "culprit (at fault)"],
    ["waiting", WAIT.mark, "waiting (not at fault)"]]) {
    const item = el("span", undefined, "outline-" + name);
    const sw = el("span", undefined, "swatch");
    sw.style.background = "#fff";
    sw.style.border = `2px solid ${colour}`;
    item.append(sw, text);
    legend.append(item);
  }
  // the counts of what the view shows, as its grid's header does
  const note = document.getElementById("window-note");
  const total = G.columns_total, shown = cols.desc.length;
  const descTotals = G.columns_total_by_desc || {};
  const rankCount = new Set(rows.rank).size;
  const sampled = G.rank_step
    ? `; ${rankCount} of ${G.ranks_total} ranks: those the findings name and one in ${G.rank_step} of the others (--max-ranks to change)`
    : "";
  function showNote() {
    const nc = view.cols.length;
    let positions;
    if (view.desc === null) {
      positions = total > shown
        ? `${shown} of ${total} schedule positions shown (--columns to change)`
        : `${shown} schedule positions`;
    } else {
      const all = descTotals[view.desc] ?? nc;
      positions = all > nc
        ? `${nc} of ${all} ${view.desc} schedule positions shown (the window holds ${shown} of ${total} in all groups; --columns to change)`
        : `${nc} ${view.desc} schedule positions`;
    }
    note.textContent = `${positions}${sampled}; shades of a colour: different call sites`;
  }

  // --- start ---------------------------------------------------------------------------
  const root = findingOf(data.root_cause);
  if (root) selectFinding(data.root_cause);
  else if (setView(views[0] ? views[0].id : "all")) reveal();
  draw();
  window.frReport = {
    ready: true,
    firstRenderMs: performance.now(),
    views: () => views.map(v => ({id: v.id, label: v.label, rows: v.rows.length, cols: v.cols.length})),
    setView: id => { const ok = setView(id); if (ok) reveal(); draw(); return ok; },
    selectFinding: i => { const ok = selectFinding(i); draw(); return ok; },
    // what is on screen now: a redraw still waiting for its animation frame is done first
    frame: () => { if (pending) draw(); return frame; },
    // a cell by rank, group name and collective seq: its row, column and what it shows
    find: (rank, group, seq) => {
      const row = rows.rank.findIndex((x, r) => x === rank && G.groups[rows.group[r]].name === group);
      const desc = row >= 0 ? groupDesc[rows.group[row]] : null;
      const col = cols.desc.findIndex((d, c) => d === desc && !cols.p2p[c] && cols.seq[c] === seq && cols.sub[c] === 0);
      if (row < 0 || col < 0) return null;
      let i = -1;
      for (let k = 0; k < nCells; k++) if (cells.row[k] === row && cells.col[k] === col) { i = k; break; }
      return {row, col, kind: i >= 0 ? "entry" : absentKind(row, col), state: i >= 0 ? G.states[cells.state[i]] : null};
    },
    // where a cell is on screen (scrolled into view first), in page pixels
    cellBox: (row, col) => {
      const vr = view.rowPos[row], vc = view.colPos[col];
      if (vr < 0 || vc < 0) return null;
      scrollTo(vr, vc);
      draw();
      const box = scroll.getBoundingClientRect();
      return {x: box.left + LABEL_W + vc * cw - scroll.scrollLeft, y: box.top + HEADER_H + vr * ch - scroll.scrollTop,
        w: cw, h: ch};
    },
    // milliseconds per full redraw of what is on screen (scrolling costs one)
    timeDraw: (n = 20) => {
      const t = performance.now();
      for (let k = 0; k < n; k++) draw();
      return (performance.now() - t) / n;
    },
  };
  document.documentElement.dataset.rendered = "true";
})();
