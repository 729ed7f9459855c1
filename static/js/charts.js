/* Draws every Plotly figure on the page.
 *
 * Each chart is a <div data-figure="ID"> next to a <script type="application/json" id="ID">
 * written by Django's json_script from runs/telemetry/charts.py. The figure comes with transparent
 * backgrounds; colours for text and grid lines are read here from the stylesheet's custom
 * properties, so the charts follow the light or dark theme, and are redrawn if it changes.
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
    return out;
  }

  var drawn = [];

  function draw() {
    if (typeof Plotly === "undefined") {
      return;
    }
    document.querySelectorAll("[data-figure]").forEach(function (el) {
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
  }

  document.addEventListener("DOMContentLoaded", draw);
  if (window.matchMedia) {
    var query = window.matchMedia("(prefers-color-scheme: dark)");
    if (query.addEventListener) {
      query.addEventListener("change", restyle);
    }
  }
})();
