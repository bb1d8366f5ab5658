// xroce capture page: choosing a packet draws its headers bit by bit.
// Everything from the capture is set as text (textContent), never as markup.
"use strict";
(function () {
  var errors = [];
  window.addEventListener("error", function (e) { errors.push(String(e.message)); });
  var consoleError = console.error;
  console.error = function () {
    errors.push(Array.prototype.join.call(arguments, " "));
    consoleError.apply(console, arguments);
  };

  var data = { layouts: [], pkts: [] };
  try {
    data = JSON.parse(document.getElementById("data").textContent);
  } catch (e) {
    errors.push("data: " + e.message);
  }
  var byN = {};
  data.pkts.forEach(function (p) { byN[p[0]] = p[1]; });
  var rows = {};
  document.querySelectorAll("#list tbody tr").forEach(function (tr) { rows[tr.dataset.n] = tr; });

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // bitTable draws fields as the specification does: 32-bit rows, bit
  // numbers on top, each field a box as wide as its bits. A field that
  // starts a row and fills whole rows is one box over those rows; a field
  // that crosses the end of a row goes on in the next one.
  function bitTable(fields, values, cls) {
    var t = el("table", "bits");
    var head = el("tr"), head2 = el("tr");
    for (var i = 0; i < 32; i++) {
      head.appendChild(el("th", "", i % 10 === 0 ? String(i / 10) : ""));
      head2.appendChild(el("th", "", String(i % 10)));
    }
    t.appendChild(head);
    t.appendChild(head2);
    var tr = el("tr"), used = 0;
    t.appendChild(tr);
    function next() {
      tr = el("tr");
      t.appendChild(tr);
      used = 0;
    }
    fields.forEach(function (f, j) {
      var name = f[0], bits = f[1], value = values[j] === undefined ? "" : values[j];
      var rowsOf = 1, take;
      if (used === 0 && bits > 32 && bits % 32 === 0) {
        rowsOf = bits / 32;
        take = 32;
      }
      var left = bits, part = 0;
      while (left > 0) {
        take = rowsOf > 1 ? 32 : Math.min(left, 32 - used);
        var td = el("td", cls);
        td.colSpan = take;
        if (rowsOf > 1) td.rowSpan = rowsOf;
        var label = part > 0 ? name + " (cont.)" : name;
        td.title = label + " = " + value + " (" + bits + " bits)";
        td.appendChild(document.createTextNode(take >= 2 || name.length <= 2 ? label : ""));
        td.appendChild(el("span", "", value));
        tr.appendChild(td);
        left -= rowsOf > 1 ? bits : take;
        used += take;
        part++;
        if (used === 32) {
          next();
          for (var r = 1; r < rowsOf; r++) next();
        }
      }
    });
    if (tr.childNodes.length === 0) t.removeChild(tr);
    return t;
  }

  function show(n) {
    var box = document.getElementById("hdrbody");
    var hs = byN[n];
    if (!hs) return false;
    box.textContent = "";
    document.getElementById("hdr").hidden = false;
    var d = el("div", "hdr");
    var tr = rows[n];
    var info = tr ? tr.cells[5] : null, em = info ? info.querySelector("em") : null;
    d.appendChild(el("h3", "", "Packet " + n + (tr ? ", " + tr.cells[1].textContent + " s, " + tr.cells[2].textContent + " > " + tr.cells[3].textContent : "")));
    if (info) d.appendChild(el("p", "sum", info.firstChild ? info.firstChild.textContent : ""));
    if (em) d.appendChild(el("p", "note", em.textContent));
    hs.forEach(function (h) {
      var layout = data.layouts[h[0]];
      if (!layout) return;
      var name = layout[0], fields = layout[1], about = layout[2];
      if (fields.length === 0) {
        var p = el("p", "sum");
        p.appendChild(el("b", "", name + " "));
        p.appendChild(document.createTextNode(h[1]));
        d.appendChild(p);
        return;
      }
      var title = el("h4");
      title.appendChild(el("b", "", name));
      title.appendChild(document.createTextNode(about ? about + (h[1] ? ": " + h[1] : "") : h[1]));
      d.appendChild(title);
      d.appendChild(bitTable(fields, h[2], name === "ICRC" ? "icrc" : ""));
    });
    box.appendChild(d);
    return true;
  }

  // reveal marks packet n and scrolls the list and the diagrams (inside
  // their boxes, not the page) to it.
  function reveal(n) {
    document.querySelectorAll(".sel").forEach(function (e) { e.classList.remove("sel"); });
    var tr = rows[n];
    if (tr) {
      tr.classList.add("sel");
      var lb = tr.closest(".listbox");
      lb.scrollTop = tr.offsetTop - lb.clientHeight / 3;
    }
    document.querySelectorAll('g.arrow[data-n="' + Number(n) + '"]').forEach(function (g) {
      g.classList.add("sel");
      var box = g.closest(".seqbox"), y = Number(g.querySelector("line").getAttribute("y1"));
      if (y < box.scrollTop || y > box.scrollTop + box.clientHeight) box.scrollTop = y - box.clientHeight / 3;
    });
  }

  // choose draws packet n's headers and reveals it.
  function choose(n) {
    if (!show(n)) return;
    if (history.replaceState) history.replaceState(null, "", "#pkt=" + n);
    reveal(n);
  }

  function hide() {
    document.getElementById("hdr").hidden = true;
    document.querySelectorAll(".sel").forEach(function (e) { e.classList.remove("sel"); });
    if (history.replaceState) history.replaceState(null, "", location.pathname);
  }
  document.getElementById("close").addEventListener("click", hide);
  document.addEventListener("keydown", function (e) { if (e.key === "Escape") hide(); });

  document.querySelector("#list tbody").addEventListener("click", function (e) {
    var tr = e.target.closest("tr");
    if (tr) choose(tr.dataset.n);
  });
  document.querySelectorAll("svg.seq").forEach(function (svg) {
    svg.addEventListener("click", function (e) {
      var g = e.target.closest("g.arrow");
      if (g) choose(g.dataset.n);
    });
  });

  // #pkt=N draws packet N's headers; #see=N only shows where it is.
  var m = /^#(pkt|see)=(\d+)$/.exec(location.hash);
  if (m && m[1] === "pkt") choose(m[2]);
  if (m && m[1] === "see") reveal(m[2]);

  // What the page drew, for tests that load it in a headless browser.
  var st = document.getElementById("selftest");
  st.dataset.arrows = document.querySelectorAll("svg.seq g.arrow").length;
  st.dataset.gaps = document.querySelectorAll("svg.seq g.gapmark").length;
  st.dataset.waits = document.querySelectorAll("svg.seq g.wait").length;
  st.dataset.diagrams = document.querySelectorAll("svg.seq").length;
  st.dataset.graphs = document.querySelectorAll("svg.graph").length;
  st.dataset.rows = document.querySelectorAll("#list tbody tr").length;
  st.dataset.packets = data.pkts.length;
  st.dataset.selected = document.querySelectorAll("#list tbody tr.sel").length;
  st.dataset.headers = document.querySelectorAll("#hdr table.bits").length;
  st.dataset.fields = document.querySelectorAll("#hdr table.bits td").length;
  st.dataset.fieldnames = Array.prototype.map.call(document.querySelectorAll("#hdr h4 b"), function (b) { return b.textContent; }).join(",");
  st.dataset.errors = errors.length;
  st.textContent = errors.join("\n");
  st.dataset.ms = Math.round(performance.now());
  st.dataset.done = "1";
})();
