/* Live tail of the log viewer while a run is active.
 *
 * The run page wraps the log viewer in <div data-logtail="URL" data-logtail-after="N"> only
 * when the run is queued or running and no search is applied. Every 3 s this asks URL
 * (runs/<pk>/log/tail.json?attempt=&node=) for the complete lines after the last one shown
 * and appends them with textContent (never as HTML). Polling stops once the server says the
 * run is no longer active, and pauses while the tab is hidden.
 */
(function () {
  "use strict";

  var INTERVAL_MS = 3000;

  function codeBlock(box) {
    var code = box.querySelector("pre.log code");
    if (code) {
      return code;
    }
    var pre = document.createElement("pre");
    pre.className = "log";
    code = document.createElement("code");
    pre.appendChild(code);
    var empty = box.querySelector("p.empty");
    if (empty) {
      empty.replaceWith(pre);
    } else {
      box.appendChild(pre);
    }
    return code;
  }

  function appendLines(box, lines) {
    var pre = box.querySelector("pre.log");
    var atBottom = !pre || pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 8;
    var code = codeBlock(box);
    lines.forEach(function (line) {
      var span = document.createElement("span");
      span.className = "line";
      span.id = "L" + line.n;
      var link = document.createElement("a");
      link.className = "ln";
      link.href = "#L" + line.n;
      link.textContent = String(line.n);
      span.appendChild(link);
      span.appendChild(document.createTextNode(line.text));
      code.appendChild(span);
      code.appendChild(document.createTextNode("\n"));
    });
    pre = box.querySelector("pre.log");
    if (atBottom && pre) {
      pre.scrollTop = pre.scrollHeight;
    }
  }

  function follow(box) {
    var after = parseInt(box.dataset.logtailAfter || "0", 10) || 0;
    var timer = null;

    function poll() {
      if (!box.isConnected) {
        return;  // logs.js swapped another node's log in: that one has its own follower
      }
      if (document.hidden) {
        timer = setTimeout(poll, INTERVAL_MS);
        return;
      }
      var url = box.dataset.logtail + "&after=" + after;
      fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (body) {
          if (!body) {
            return;
          }
          if (body.lines && body.lines.length) {
            appendLines(box, body.lines);
            after = body.last;
          }
          if (body.active || body.more) {
            timer = setTimeout(poll, body.more ? 0 : INTERVAL_MS);
          }
        })
        .catch(function () { timer = setTimeout(poll, INTERVAL_MS * 2); });
    }

    timer = setTimeout(poll, INTERVAL_MS);
    return timer;
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-logtail]").forEach(follow);
  });
  document.addEventListener("airboard:log-swapped", function (event) {
    event.detail.querySelectorAll("[data-logtail]").forEach(follow);
  });
})();
