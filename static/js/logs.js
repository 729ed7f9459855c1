/* Log viewer: choosing another attempt or node shows that log at once. On the run page the
 * viewer is swapped in from runs/<pk>/log/view/ without a page load (the charts stay as they
 * are), the URL follows (history.pushState; the back button restores it through popstate);
 * elsewhere, and without JavaScript through the Show button, the form reloads the page.
 * Changing the attempt drops the node choice, because node indexes belong to one attempt.
 *
 * The fragment holds a window of the log (the tail by default): its "earlier" / "later" links
 * (data-log-page) swap in the next window the same way (?before=, ?start=), and a link to a
 * line (#L123) asks for the window around it (?line=123), then marks and scrolls to it.
 */
(function () {
  "use strict";

  var LOG_KEYS = ["attempt", "node", "q", "start", "before", "line"];
  var WINDOW_KEYS = ["start", "before", "line"];

  function hashLine() {
    return /^#L\d+$/.test(location.hash) ? location.hash.slice(2) : "";
  }

  function showHashLine(body) {
    var number = hashLine();
    var line = number && body.querySelector("#L" + number);
    if (!line) {
      return;
    }
    body.querySelectorAll(".line-target").forEach(function (old) { old.classList.remove("line-target"); });
    line.classList.add("line-target");
    line.scrollIntoView({ block: "center" });
  }

  function logKey(search) {
    var params = new URLSearchParams(search);
    return LOG_KEYS.map(function (name) { return params.get(name) || ""; }).join("|");
  }

  function swap(body, query, push) {
    var url = body.dataset.fragment + (query ? "?" + query : "");
    body.dataset.loading = "1";
    return fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        delete body.dataset.loading;
        if (html === null) {
          return;
        }
        body.innerHTML = html;
        body.dataset.swaps = String(Number(body.dataset.swaps || 0) + 1);
        wire(body);
        showHashLine(body);
        if (push) {
          var params = new URLSearchParams(location.search);
          var chosen = new URLSearchParams(query);
          LOG_KEYS.forEach(function (name) {
            if (chosen.get(name)) {
              params.set(name, chosen.get(name));
            } else {
              params.delete(name);
            }
          });
          var search = params.toString();
          history.pushState({ airboard: "log" }, "", location.pathname + (search ? "?" + search : "") + "#log");
        }
        document.dispatchEvent(new CustomEvent("airboard:log-swapped", { detail: body }));
      });
  }

  function formQuery(form) {
    var params = new URLSearchParams();
    Array.prototype.forEach.call(form.elements, function (element) {
      if (element.name && !element.disabled && element.value !== "") {
        params.set(element.name, element.value);
      }
    });
    return params.toString();
  }

  function wire(scope) {
    var body = document.getElementById("log-body");
    scope.querySelectorAll("form[data-autosubmit]").forEach(function (form) {
      var inPage = body && body.contains(form);
      form.querySelectorAll("select").forEach(function (select) {
        select.addEventListener("change", function () {
          if (select.name === "attempt" && form.elements.node) {
            form.elements.node.disabled = true;
          }
          if (inPage) {
            swap(body, formQuery(form), true);
          } else {
            form.submit();
          }
        });
      });
      if (inPage) {
        form.addEventListener("submit", function (event) {
          event.preventDefault();
          swap(body, formQuery(form), true);
        });
      }
    });
    if (body && body.contains(scope)) {
      scope.querySelectorAll("a[data-log-page]").forEach(function (link) {
        link.addEventListener("click", function (event) {
          event.preventDefault();
          var params = new URLSearchParams(new URL(link.href, location.href).search);
          var query = new URLSearchParams();
          LOG_KEYS.forEach(function (name) { if (params.get(name)) { query.set(name, params.get(name)); } });
          swap(body, query.toString(), true).then(function () {
            var pre = body.querySelector("pre.log");
            if (pre) {
              pre.scrollTop = params.get("start") ? 0 : pre.scrollHeight;
            }
          });
        });
      });
    }
  }

  /* The run page ships without its log (data-lazy): it comes once the GPU panels above the
   * fold are drawn (charts.js's airboard:panels-drawn), when the log box comes into view, or
   * at once on a page without panels, whichever is first. */
  function loadLazy(body) {
    if (body.dataset.lazy === undefined) {
      return;
    }
    delete body.dataset.lazy;
    var params = new URLSearchParams(location.search);
    var query = new URLSearchParams();
    LOG_KEYS.forEach(function (name) { if (params.get(name)) { query.set(name, params.get(name)); } });
    // A link to a line (#L123) asks for the window around it, unless the URL names a window.
    if (hashLine() && !WINDOW_KEYS.some(function (name) { return params.get(name); })) {
      query.set("line", hashLine());
    }
    swap(body, query.toString(), false);
  }

  document.addEventListener("DOMContentLoaded", function () {
    wire(document);
    var body = document.getElementById("log-body");
    if (body && body.dataset.lazy !== undefined) {
      if (!document.querySelector("#gpu-panels [data-field]")) {
        loadLazy(body);
      } else {
        document.addEventListener("airboard:panels-drawn", function () { loadLazy(body); });
        if ("IntersectionObserver" in window) {
          new IntersectionObserver(function (entries, observer) {
            if (entries.some(function (entry) { return entry.isIntersecting; })) {
              observer.disconnect();
              loadLazy(body);
            }
          }).observe(body);
        }
      }
    }
    if (body) {
      var shown = logKey(location.search);
      window.addEventListener("popstate", function () {
        var wanted = logKey(location.search);
        if (wanted !== shown) {
          var params = new URLSearchParams(location.search);
          var query = new URLSearchParams();
          LOG_KEYS.forEach(function (name) { if (params.get(name)) { query.set(name, params.get(name)); } });
          swap(body, query.toString(), false);
        }
      });
      document.addEventListener("airboard:log-swapped", function () { shown = logKey(location.search); });
    }

    // Keep a deep link to a line (#L123) in view inside the scrolling log box.
    if (location.hash && /^#L\d+$/.test(location.hash)) {
      var line = document.getElementById(location.hash.slice(1));
      if (line) {
        line.scrollIntoView({ block: "center" });
      }
    }
  });
})();
