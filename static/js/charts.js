/* Draws every Plotly figure on the page.
 *
 * Each chart is a <div data-figure="ID"> next to a <script type="application/json" id="ID">
 * written by Django's json_script from runs/telemetry/charts.py. The figure comes with transparent
 * backgrounds; colours for text and grid lines are read here from the stylesheet's custom
 * properties, so the charts follow the light or dark theme, and are redrawn if it changes.
 *
 * The run page's GPU panels (<div data-field> inside #gpu-panels) come without data: each asks
 * the run's telemetry.json (?fields=&width=&range=&gpu_node=&view=) when it comes into view
 * (IntersectionObserver), panels that come into view together in one request. The range
 * picker, the node selector and the view switch change that state without a page load: the
 * URL follows (history.pushState, the back button restores it through popstate) and only the
 * panels in view are asked again, the others when they come into view. Zooming one panel
 * zooms all of them (linked zoom), each asked again for the new window at its resolution.
 */
(function () {
  "use strict";

  function cssVar(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }

  function themed(layout) {
    var text = cssVar("--text");
    var muted = cssVar("--muted");
    var grid = cssVar("--grid");
    var out = Object.assign({}, layout);
    out.font = Object.assign({ family: getComputedStyle(document.body).fontFamily, color: text }, layout.font || {});
    ["xaxis", "yaxis"].forEach(function (axis) {
      out[axis] = Object.assign({ gridcolor: grid, zerolinecolor: grid, linecolor: grid, color: muted }, layout[axis] || {});
    });
    out.hoverlabel = Object.assign({ bgcolor: cssVar("--surface"), bordercolor: grid, font: { color: text } }, layout.hoverlabel || {});
    out.legend = Object.assign({}, layout.legend || {}, { font: Object.assign({ color: text }, (layout.legend || {}).font || {}) });
    return clearOfModebar(out);
  }

  /* On a phone the modebar (Plotly's toolbar, top right, about 220 px wide) sat on the panel's
   * title, which starts at the left and runs past the right edge. Below NARROW a titled chart
   * keeps the modebar's row (its 26 px buttons sit 2 px from the top) above the title: the
   * title sits just above the plot, and the top margin and the height grow by MODEBAR_ROW,
   * what the title's margin lacked for it (the plot keeps its size). */
  var NARROW = window.matchMedia ? window.matchMedia("(max-width: 600px)") : null;
  var MODEBAR_ROW = 16;

  function clearOfModebar(layout) {
    var title = layout.title;
    var text = title && (typeof title === "string" ? title : title.text);
    if (!NARROW || !NARROW.matches || !text) {
      return layout;
    }
    var out = Object.assign({}, layout);
    var margin = layout.margin || {};
    out.margin = Object.assign({}, margin, { t: (margin.t === undefined ? 100 : margin.t) + MODEBAR_ROW });
    if (layout.height) {
      out.height = layout.height + MODEBAR_ROW;
    }
    out.title = Object.assign({}, typeof title === "string" ? { text: title } : title,
      { yref: "paper", y: 1, yanchor: "bottom", pad: { b: 6 } });
    return out;
  }

  var drawn = [];

  function draw() {
    if (typeof Plotly === "undefined") {
      return;
    }
    document.querySelectorAll("[data-figure]").forEach(function (el) {
      if (el.dataset.field) {
        return;  // a GPU panel: its data comes from telemetry.json (panels below)
      }
      var source = document.getElementById(el.dataset.figure);
      if (!source) {
        return;
      }
      var figure = JSON.parse(source.textContent);
      Plotly.newPlot(el, figure.data, themed(figure.layout), { responsive: true, displaylogo: false });
      var item = { el: el, layout: figure.layout };
      drawn.push(item);
      if (figure.layout.meta && figure.layout.meta.telemetry_field) {
        el.on("plotly_relayout", function (event) { refine(item, event); });
      }
      if (el.closest(".shared-crosshair")) {
        share(el);
      }
    });
    panels();
  }

  /* The run page's GPU panels share one crosshair: hovering a time on one panel shows the
   * same time on every other panel of the group (Plotly.Fx.hover by x value). `sharing`
   * stops the hover that one panel gives the others from echoing back. */
  var sharing = false;

  function share(el) {
    var group = el.closest(".shared-crosshair");
    el.on("plotly_hover", function (event) {
      if (sharing || !event.points || !event.points.length) {
        return;
      }
      sharing = true;
      var x = event.points[0].x;
      // Date axes take the hover position in milliseconds (their calc coordinates).
      if (typeof x === "string") {
        x = Date.parse(x.replace(" ", "T") + "Z");
      }
      group.querySelectorAll("[data-figure]").forEach(function (other) {
        if (other !== el && other.data) {
          try { Plotly.Fx.hover(other, { xval: x }); } catch (e) { /* a panel still drawing */ }
        }
      });
      sharing = false;
    });
    el.on("plotly_unhover", function () {
      if (sharing) {
        return;
      }
      group.querySelectorAll("[data-figure]").forEach(function (other) {
        if (other !== el && other.data) {
          Plotly.Fx.unhover(other);
        }
      });
    });
  }

  /* GPU charts carry layout.meta.telemetry_field: on zoom, fetch the range again from the
   * run's telemetry.json (relative to the run page), which answers at a finer tier, and on
   * a reset fetch the whole run. Only the latest request's answer is drawn. */
  function refine(item, event) {
    var from = event["xaxis.range[0]"];
    var to = event["xaxis.range[1]"];
    if (from === undefined && !event["xaxis.autorange"]) {
      return;
    }
    var params = new URLSearchParams({ field: item.layout.meta.telemetry_field });
    // A panel filtered to one node (the node selector) asks for that node again.
    if (item.layout.meta.node !== undefined) {
      params.set("gpu_node", item.layout.meta.node);
    }
    if (from !== undefined) {
      params.set("from", from);
      params.set("to", to);
    }
    var ticket = (item.ticket || 0) + 1;
    item.ticket = ticket;
    fetch("telemetry.json?" + params.toString(), { credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (body) {
        if (!body || !body.figure || item.ticket !== ticket) {
          return;
        }
        var layout = body.figure.layout;
        if (from !== undefined) {
          layout.xaxis = Object.assign({}, layout.xaxis, { range: [from, to], autorange: false });
        }
        item.layout = layout;
        Plotly.react(item.el, body.figure.data, themed(layout));
      });
  }

  function restyle() {
    drawn.forEach(function (item) {
      Plotly.relayout(item.el, themed(item.layout));
    });
    Object.keys(board.items).forEach(function (id) {
      var item = board.items[id];
      if (item.layout) {
        Plotly.relayout(item.el, themed(item.layout));
      }
    });
  }

  // --- GPU panels: data per panel, linked zoom, switches without a page load -----------

  var board = { root: null, state: null, items: {}, queue: [], timer: null, ticket: 0, echo: false, signalsStale: false };
  var STATE_KEYS = ["range", "gpu_node", "view"];

  function stateFromUrl() {
    var params = new URLSearchParams(location.search);
    var root = board.root;
    return {
      range: params.get("range") || "all",
      gpu_node: params.get("gpu_node") || "all",
      view: params.get("view") || (root && root.dataset.defaultView) || "envelope",
      from: null,
      to: null
    };
  }

  function stateKey(state) {
    return [state.range, state.gpu_node, state.view, state.from || "", state.to || ""].join("|");
  }

  function panelUrl(fields, width) {
    var state = board.state;
    var params = new URLSearchParams({ fields: fields.join(","), width: String(width), view: state.view });
    if (state.gpu_node !== "all") {
      params.set("gpu_node", state.gpu_node);
    }
    if (state.from) {
      params.set("from", state.from);
      params.set("to", state.to);
    } else if (state.range !== "all") {
      params.set("range", state.range);
    }
    return board.root.dataset.telemetry + "?" + params.toString();
  }

  function request(el) {
    var key = stateKey(board.state);
    if (el.dataset.loaded === key || el.dataset.loading === key) {
      return;
    }
    el.dataset.loading = key;
    board.queue.push(el);
    if (board.timer === null) {
      // Panels that come into view in the same moment share one request (a microtask, not a
      // timer: it runs before the next frame, and under a test's fake clock too).
      board.timer = true;
      Promise.resolve().then(flush);
    }
  }

  function flush() {
    board.timer = null;
    var batch = board.queue.splice(0);
    if (!batch.length) {
      return;
    }
    var key = stateKey(board.state);
    var zoom = board.state.from ? [board.state.from, board.state.to] : null;
    var width = Math.max.apply(null, batch.map(function (el) { return el.clientWidth || 0; })) || 1000;
    var fields = batch.map(function (el) { return el.dataset.field; });
    var ticket = ++board.ticket;
    var url = panelUrl(fields, Math.round(width));
    var askSignals = board.signalsStale;
    if (askSignals) {
      board.signalsStale = false;
      url += "&signals=1";
    }
    board.root.dataset.pending = String(Number(board.root.dataset.pending || 0) + 1);
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { return response.ok ? response.json() : null; })
      .catch(function () { return null; })
      .then(function (body) {
        board.root.dataset.pending = String(Number(board.root.dataset.pending) - 1);
        if (!body || stateKey(board.state) !== key) {
          batch.forEach(function (el) { if (el.dataset.loading === key) { delete el.dataset.loading; } });
          return;
        }
        var line = document.getElementById("signals");
        if (body.signals_html !== undefined && line) {
          line.outerHTML = body.signals_html;
        }
        var byField = {};
        body.panels.forEach(function (panel) { byField[panel.field] = panel; });
        batch.forEach(function (el) {
          var panel = byField[el.dataset.field];
          delete el.dataset.loading;
          el.dataset.loaded = key;
          show(el, panel ? panel.figure : null, zoom);
        });
        board.root.dataset.requests = String(ticket);
        // The first panels are drawn: what waited for them (the log viewer, logs.js) may come.
        document.dispatchEvent(new CustomEvent("airboard:panels-drawn"));
      });
  }

  function show(el, figure, zoom) {
    var box = el.parentNode;
    var note = box.querySelector(".empty");
    if (!figure) {
      if (el.data) {
        Plotly.purge(el);
      }
      el.hidden = true;
      if (!note) {
        note = document.createElement("p");
        note.className = "empty";
        box.appendChild(note);
      }
      note.textContent = el.dataset.empty || "No samples in this range.";
      delete board.items[el.dataset.figure];
      return;
    }
    if (note) {
      note.remove();
    }
    el.hidden = false;
    var layout = figure.layout;
    sharedX(figure);
    if (zoom) {
      layout.xaxis = Object.assign({}, layout.xaxis, { range: zoom, autorange: false });
    }
    var first = !el.data;
    board.echo = true;
    Plotly.react(el, figure.data, themed(layout), { responsive: true, displaylogo: false });
    board.echo = false;
    board.items[el.dataset.figure] = { el: el, layout: layout };
    el.dataset.drawn = String(Number(el.dataset.drawn || 0) + 1);
    // When (ms since the page's navigation began) this panel was last drawn: bench/run_page.py reads it.
    el.dataset.drawnAt = String(Math.round(performance.now()));
    if (first) {
      el.on("plotly_relayout", function (event) { linkedZoom(el, event); });
      share(el);
    }
  }

  /* One panel zoomed (or reset): every panel follows at once, then each is asked again for
   * the new window, at the resolution that window has (raw samples once it is short). */
  function linkedZoom(source, event) {
    if (board.echo) {
      return;
    }
    var from = event["xaxis.range[0]"];
    var to = event["xaxis.range[1]"];
    if (from === undefined && event["xaxis.range"]) {
      from = event["xaxis.range"][0];
      to = event["xaxis.range"][1];
    }
    if (from === undefined && !event["xaxis.autorange"]) {
      return;
    }
    // The echo of the relayout this sent to the other panels (Plotly emits it after a tick):
    // the window is already the state's, so nothing to follow or re-read.
    var next = from === undefined ? null : String(from);
    if (next === board.state.from && (next === null || String(to) === board.state.to)) {
      return;
    }
    board.state.from = from === undefined ? null : String(from);
    board.state.to = to === undefined ? null : String(to);
    board.echo = true;
    Object.keys(board.items).forEach(function (id) {
      var item = board.items[id];
      if (item.el !== source) {
        Plotly.relayout(item.el, from === undefined ? { "xaxis.autorange": true } : { "xaxis.range": [from, to] });
      }
    });
    board.echo = false;
    reload();
  }

  /* An envelope panel sends its times once, in the first trace (layout.meta.shared_x). */
  function sharedX(figure) {
    if (figure.layout.meta && figure.layout.meta.shared_x && figure.data.length) {
      figure.data.forEach(function (trace) {
        if (trace.x === undefined) {
          trace.x = figure.data[0].x;
        }
      });
    }
    return figure;
  }
  window.airboardSharedX = sharedX;

  function visible(el) {
    // The observer's margin (100 px) too: a panel it counts as in view is asked again.
    var box = el.getBoundingClientRect();
    return box.bottom > -100 && box.top < (window.innerHeight || document.documentElement.clientHeight) + 100;
  }

  function reload() {
    board.root.querySelectorAll("[data-field]").forEach(function (el) {
      if (visible(el.parentNode)) {
        request(el);
      }
    });
  }

  function syncControls() {
    var state = board.state;
    board.root.dataset.range = state.range;
    board.root.dataset.gpuNode = state.gpu_node;
    board.root.dataset.view = state.view;
    var picker = document.getElementById("range-picker");
    if (picker) {
      picker.querySelectorAll("a, strong").forEach(function (choice) {
        var active = choice.textContent.trim() === state.range;
        choice.classList.toggle("current", active);
        if (active) {
          choice.setAttribute("aria-current", "true");
        } else {
          choice.removeAttribute("aria-current");
        }
      });
    }
    var select = document.getElementById("gpu-node");
    if (select) {
      select.value = state.gpu_node;
    }
    document.querySelectorAll("#node-skew tbody tr").forEach(function (row) {
      var link = row.querySelector("a");
      row.classList.toggle("selected", !!link && link.textContent.trim() === state.gpu_node);
    });
    document.querySelectorAll("#gpu-view [data-view]").forEach(function (link) {
      link.classList.toggle("current", link.dataset.view === state.view);
    });
    // Links the server wrote with the page's query string (the metrics' x switch) carry the new state.
    document.querySelectorAll("#metrics-x a").forEach(function (link) {
      var url = new URL(link.href, location.href);
      [["range", "all"], ["gpu_node", "all"], ["view", "envelope"]].forEach(function (pair) {
        if (state[pair[0]] === pair[1]) {
          url.searchParams.delete(pair[0]);
        } else {
          url.searchParams.set(pair[0], state[pair[0]]);
        }
      });
      link.href = url.pathname + url.search + url.hash;
    });
  }

  function navigate(changes) {
    var params = new URLSearchParams(location.search);
    Object.keys(changes).forEach(function (name) {
      var value = changes[name];
      var fallback = name === "range" ? "all" : name === "gpu_node" ? "all" : "envelope";
      if (value === fallback) {
        params.delete(name);
      } else {
        params.set(name, value);
      }
      if (name === "gpu_node" && board.state[name] !== value) {
        board.signalsStale = true;
      }
      board.state[name] = value;
    });
    board.state.from = null;
    board.state.to = null;
    var query = params.toString();
    history.pushState({ airboard: "gpus" }, "", location.pathname + (query ? "?" + query : "") + "#gpus");
    syncControls();
    reload();
  }

  function wireControls() {
    var picker = document.getElementById("range-picker");
    if (picker) {
      // The server drew the current range as <strong>: make every choice a link.
      picker.querySelectorAll("strong").forEach(function (strong) {
        var link = document.createElement("a");
        link.href = "?range=" + encodeURIComponent(strong.textContent.trim()) + "#gpus";
        link.textContent = strong.textContent;
        strong.replaceWith(link);
      });
      picker.addEventListener("click", function (event) {
        var link = event.target.closest("a");
        if (!link) {
          return;
        }
        event.preventDefault();
        navigate({ range: link.textContent.trim() });
      });
    }
    var form = document.getElementById("node-selector");
    if (form) {
      var select = document.getElementById("gpu-node");
      form.addEventListener("submit", function (event) {
        event.preventDefault();
        navigate({ gpu_node: select.value });
      });
      select.addEventListener("change", function () {
        navigate({ gpu_node: select.value });
      });
    }
    document.querySelectorAll("#node-skew tbody a").forEach(function (link) {
      link.addEventListener("click", function (event) {
        event.preventDefault();
        navigate({ gpu_node: link.textContent.trim() });
      });
    });
    var views = document.getElementById("gpu-view");
    if (views) {
      views.innerHTML = "";
      views.appendChild(document.createTextNode("Show: "));
      [["envelope", "mean and min–max band"], ["gpus", "each GPU"]].forEach(function (choice, i) {
        if (i) {
          views.appendChild(document.createTextNode(" · "));
        }
        var link = document.createElement("a");
        link.href = "#gpus";
        link.dataset.view = choice[0];
        link.textContent = choice[1];
        link.addEventListener("click", function (event) {
          event.preventDefault();
          navigate({ view: choice[0] });
        });
        views.appendChild(link);
      });
    }
    window.addEventListener("popstate", function () {
      var next = stateFromUrl();
      if (next.gpu_node !== board.state.gpu_node) {
        board.signalsStale = true;
      }
      STATE_KEYS.forEach(function (name) { board.state[name] = next[name]; });
      board.state.from = null;
      board.state.to = null;
      syncControls();
      reload();
    });
  }

  function panels() {
    var root = document.getElementById("gpu-panels");
    if (!root || board.root) {
      return;
    }
    board.root = root;
    board.state = stateFromUrl();
    wireControls();
    syncControls();
    var watched = root.querySelectorAll("[data-field]");
    if (!("IntersectionObserver" in window)) {
      watched.forEach(request);
      return;
    }
    var observer = new IntersectionObserver(function (entries) {
      entries.forEach(function (entry) {
        if (entry.isIntersecting) {
          request(entry.target.querySelector("[data-field]"));
        }
      });
    }, { rootMargin: "100px 0px" });
    watched.forEach(function (el) { observer.observe(el.parentNode); });
  }

  document.addEventListener("DOMContentLoaded", draw);
  if (NARROW && NARROW.addEventListener) {
    NARROW.addEventListener("change", restyle);  // a phone turned sideways, a window narrowed
  }
  if (window.matchMedia) {
    var query = window.matchMedia("(prefers-color-scheme: dark)");
    if (query.addEventListener) {
      query.addEventListener("change", restyle);
    }
  }
})();
