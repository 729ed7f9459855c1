/* Shows every server time in the viewer's own time zone, with UTC on hover.
 *
 * The server renders <time datetime="ISO 8601 with offset">Nov 2, 09:00</time> in the site's
 * zone (UTC by default: one zone for every viewer, right in any cache). Here each is rewritten
 * in the browser's zone in the same short shape, the year added when it is not this year, and
 * its title becomes the exact UTC time, so two people in different cities can still compare.
 * Without JavaScript the server's text stays, which is correct, only in UTC.
 */
(function () {
  "use strict";

  var now = new Date();
  var short = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", hourCycle: "h23" });
  var withYear = new Intl.DateTimeFormat(undefined, { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", hourCycle: "h23" });
  // A log line's time (data-format="clock"): the time of day to the second, as logs state it.
  var clock = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23" });
  var zone = (Intl.DateTimeFormat().resolvedOptions().timeZone || "").replace(/_/g, " ");

  function pad(n) {
    return String(n).padStart(2, "0");
  }

  function utc(date) {
    return date.getUTCFullYear() + "-" + pad(date.getUTCMonth() + 1) + "-" + pad(date.getUTCDate()) + " " +
      pad(date.getUTCHours()) + ":" + pad(date.getUTCMinutes()) + ":" + pad(date.getUTCSeconds()) + " UTC";
  }

  /* Rewrites the <time> elements under `root` (the whole document by default). Exposed as
   * window.airboardLocalTime so a script that inserts server HTML later can call it again. */
  function localize(root) {
    (root || document).querySelectorAll("time[datetime]:not([data-local])").forEach(function (el) {
      var date = new Date(el.getAttribute("datetime"));
      if (isNaN(date.getTime()) || el.getAttribute("datetime").length <= 10) {
        return; // a bare date ("2026-11-02") has no time of day to convert
      }
      var format = el.dataset.format === "clock" ? clock : date.getFullYear() === now.getFullYear() ? short : withYear;
      el.textContent = format.format(date);
      el.title = utc(date) + (zone ? " · shown in " + zone : "");
      el.dataset.local = "1";
    });
  }

  window.airboardLocalTime = localize;
  document.addEventListener("DOMContentLoaded", function () { localize(); });
})();
