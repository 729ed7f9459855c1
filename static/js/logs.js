/* Log viewer: choosing another attempt or node reloads the log at once (the form still
 * works without JavaScript through its Show button). Changing the attempt drops the node
 * choice, because node indexes belong to one attempt.
 */
(function () {
  "use strict";

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("form[data-autosubmit]").forEach(function (form) {
      form.querySelectorAll("select").forEach(function (select) {
        select.addEventListener("change", function () {
          if (select.name === "attempt" && form.elements.node) {
            form.elements.node.disabled = true;
          }
          form.submit();
        });
      });
    });

    // Keep a deep link to a line (#L123) in view inside the scrolling log box.
    if (location.hash && /^#L\d+$/.test(location.hash)) {
      var line = document.getElementById(location.hash.slice(1));
      if (line) {
        line.scrollIntoView({ block: "center" });
      }
    }
  });
})();
