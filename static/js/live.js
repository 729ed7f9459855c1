/* Keeps active runs current without a reload.
 *
 * Status: every element with data-live-run="<status.json URL>" (the run page's heading and
 * facts, the run list's rows of queued or running runs) has its status badge updated from
 * that URL every 5 s. A URL is asked once per tick however many elements share it, polling
 * pauses while the tab is hidden, and stops for a run once it has finished.
 *
 * Charts: inside [data-live-telemetry] (the run page's GPU section, only for an active run)
 * each Plotly chart with layout.meta.telemetry_field gets the points after its last one from
 * the run's telemetry.json, appended with Plotly.extendTraces, so a zoom the user set stays.
 */
(function () {
  "use strict";

  var STATUS_EVERY_MS = 5000;
  var CHARTS_EVERY_MS = 10000;
  // Asking for 30 minutes after the last point keeps the answer at the raw tier (1 Hz).
  var WINDOW_MS = 30 * 60 * 1000;

  function getJson(url) {
    return fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { return response.ok ? response.json() : null; })
      .catch(function () { return null; });
  }

  // --- Status badges ------------------------------------------------------------------

  function setBadge(el, body) {
    var badge = el.querySelector(".status");
    if (!badge || badge.textContent === body.status_label) {
      return;
    }
    badge.className = "badge status status-" + body.status;
    badge.textContent = body.status_label;
    el.dataset.liveStatus = body.status;
  }

  function pollStatus() {
    if (document.hidden) {
      return;
    }
    var byUrl = {};
    document.querySelectorAll("[data-live-run]").forEach(function (el) {
      (byUrl[el.dataset.liveRun] = byUrl[el.dataset.liveRun] || []).push(el);
    });
    Object.keys(byUrl).forEach(function (url) {
      getJson(url).then(function (body) {
        if (!body) {
          return;
        }
        byUrl[url].forEach(function (el) {
          setBadge(el, body);
          if (!body.active) {
            el.removeAttribute("data-live-run");
          }
        });
        if (!body.active) {
          document.dispatchEvent(new CustomEvent("airboard:run-finished", { detail: body }));
        }
      });
    });
  }

  // --- Chart points ---------------------------------------------------------------------

  var chartsTimer = null;

  function lastX(trace) {
    var xs = trace.x || [];
    return xs.length ? String(xs[xs.length - 1]) : null;
  }

  function toUtcString(ms) {
    // The naive UTC form runs/telemetry/charts.py writes and telemetry.json reads ("YYYY-MM-DD HH:MM:SS").
    return new Date(ms).toISOString().replace("T", " ").replace("Z", "");
  }

  function extend(gd, figure) {
    var byName = {};
    figure.data.forEach(function (trace) { byName[trace.name] = trace; });
    var update = { x: [], y: [] };
    var withCustom = gd.data.some(function (trace) { return trace.customdata; });
    if (withCustom) {
      update.customdata = [];
    }
    var indices = [];
    gd.data.forEach(function (trace, index) {
      var fresh = byName[trace.name];
      var last = lastX(trace);
      if (!fresh || last === null) {
        return;
      }
      var xs = [];
      var ys = [];
      fresh.x.forEach(function (x, i) {
        // Same format on both sides (strings of one shape, or milliseconds of 13 digits), so string order is time order.
        if (String(x) > last) {
          xs.push(x);
          ys.push(fresh.y[i]);
        }
      });
      if (!xs.length) {
        return;
      }
      indices.push(index);
      update.x.push(xs);
      update.y.push(ys);
      if (withCustom) {
        // A raw point's average is the point itself; keeps the rollup hover text in step.
        update.customdata.push(fresh.customdata ? fresh.customdata.filter(function (_, i) { return String(fresh.x[i]) > last; }) : ys);
      }
    });
    if (indices.length) {
      Plotly.extendTraces(gd, update, indices);
      // How many live points this chart has gained: for the curious, and for the e2e test.
      gd.dataset.livePoints = String(Number(gd.dataset.livePoints || 0) + update.x.reduce(function (n, xs) { return n + xs.length; }, 0));
    }
  }

  function refreshCharts() {
    if (document.hidden || typeof Plotly === "undefined") {
      return;
    }
    document.querySelectorAll("[data-live-telemetry] [data-figure]").forEach(function (gd) {
      var meta = gd.layout && gd.layout.meta;
      if (!meta || !meta.telemetry_field || !gd.data || !gd.data.length) {
        return;
      }
      // Envelope panels carry epoch milliseconds, per-GPU figures "YYYY-MM-DD HH:MM:SS" strings.
      var lasts = gd.data.map(lastX).filter(Boolean);
      if (!lasts.length) {
        return;
      }
      var starts = lasts.map(function (x) { return /^\d+$/.test(x) ? Number(x) : Date.parse(x.replace(" ", "T") + "Z"); });
      var start = Math.min.apply(null, starts);
      var from = toUtcString(start);
      var params = new URLSearchParams({
        fields: meta.telemetry_field, view: meta.view || "gpus", width: String(gd.clientWidth || 1000),
        from: from, to: toUtcString(start + WINDOW_MS)
      });
      // A panel filtered to one node (the node selector) asks for that node again.
      if (meta.node !== undefined) {
        params.set("gpu_node", meta.node);
      }
      var url = (document.getElementById("gpu-panels") || {}).dataset;
      // The run page's telemetry.json (charts.js asks the same URL for each panel).
      getJson((url && url.telemetry ? url.telemetry : "telemetry.json") + "?" + params.toString()).then(function (body) {
        var figure = body && body.panels && body.panels[0] && body.panels[0].figure;
        if (figure) {
          // Envelope panels send their times once (charts.js's airboardSharedX gives them to every trace).
          if (window.airboardSharedX) {
            window.airboardSharedX(figure);
          }
          extend(gd, figure);
        }
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    if (document.querySelector("[data-live-run]")) {
      window.setInterval(pollStatus, STATUS_EVERY_MS);
    }
    if (document.querySelector("[data-live-telemetry]")) {
      chartsTimer = window.setInterval(refreshCharts, CHARTS_EVERY_MS);
    }
  });
  document.addEventListener("airboard:run-finished", function () {
    if (chartsTimer !== null && !document.querySelector("[data-live-run]")) {
      window.clearInterval(chartsTimer);
      chartsTimer = null;
      // One last pass picks up the points written just before the run ended.
      refreshCharts();
    }
  });
})();
