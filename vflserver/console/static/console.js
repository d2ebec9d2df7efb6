// The console's one script: it refreshes <main> from the server, and nothing else.
// A job's page follows the job's event stream (/events/<job>); the overview pages refresh every
// data-refresh seconds. Never more than one refresh a second, whatever the stream sends.
(function () {
  "use strict";
  var main = document.querySelector("main");
  if (!main) { return; }
  var live = main.getAttribute("data-live") || "";
  var every = Math.max(1, Number(main.getAttribute("data-refresh") || "2")) * 1000;
  var last = 0;
  var queued = false;

  function refresh() {
    var wait = last + 1000 - Date.now();
    if (wait > 0) {
      if (!queued) { queued = true; setTimeout(function () { queued = false; refresh(); }, wait); }
      return;
    }
    last = Date.now();
    fetch(window.location.href, { cache: "no-store", credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (text) {
        if (text === null) { return; }
        var fresh = new DOMParser().parseFromString(text, "text/html").querySelector("main");
        if (fresh) { main.innerHTML = fresh.innerHTML; }
      })
      .catch(function () { /* the server is restarting: the next tick tries again */ });
  }

  if (live.indexOf("job:") === 0) {
    var source = new EventSource("/events/" + encodeURIComponent(live.slice(4)));
    source.onmessage = refresh;
    source.addEventListener("end", function () { refresh(); });
    setInterval(refresh, 5 * every);  // serving readiness and party status change without a job event
  } else if (live === "poll") {
    setInterval(refresh, every);
  }
})();
