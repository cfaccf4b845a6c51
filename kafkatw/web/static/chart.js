// A small line chart on <canvas>, written for the kafkatw console (no library, no network).
// lineChart(canvas, series, options): series = [{name, color, points: [[time_ms, value], ...]}].
// The drawn points are also left in canvas.dataset.points (JSON), so tests can read what was drawn.
"use strict";

function formatNumber(v) {
  var a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toFixed(1) + "G";
  if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (a >= 1e3) return (v / 1e3).toFixed(1) + "k";
  return (Math.round(v * 10) / 10).toString();
}

function lineChart(canvas, series, options) {
  options = options || {};
  var ctx = canvas.getContext("2d");
  var w = canvas.width, h = canvas.height;
  var left = 48, right = 10, top = 10, bottom = 22;
  ctx.clearRect(0, 0, w, h);
  ctx.fillStyle = "#ffffff";
  ctx.fillRect(0, 0, w, h);
  var tmin = Infinity, tmax = -Infinity, vmax = 0;
  series.forEach(function (s) {
    s.points.forEach(function (p) {
      tmin = Math.min(tmin, p[0]); tmax = Math.max(tmax, p[0]); vmax = Math.max(vmax, p[1]);
    });
  });
  if (!isFinite(tmin)) { tmin = Date.now() - 60000; tmax = Date.now(); }
  if (tmax === tmin) { tmin -= 1000; }
  if (vmax <= 0) { vmax = 1; }
  vmax *= 1.1;
  var x = function (t) { return left + (t - tmin) / (tmax - tmin) * (w - left - right); };
  var y = function (v) { return h - bottom - v / vmax * (h - top - bottom); };
  // grid and axis labels
  ctx.strokeStyle = "#e6e9ed"; ctx.fillStyle = "#6b7785"; ctx.font = "11px sans-serif"; ctx.lineWidth = 1;
  for (var i = 0; i <= 4; i++) {
    var v = vmax * i / 4, yy = Math.round(y(v)) + 0.5;
    ctx.beginPath(); ctx.moveTo(left, yy); ctx.lineTo(w - right, yy); ctx.stroke();
    ctx.fillText(formatNumber(v), 4, yy + 4);
  }
  var span = Math.round((tmax - tmin) / 1000);
  ctx.fillText("last " + span + " s" + (options.unit ? " — " + options.unit : ""), left, h - 6);
  ctx.strokeStyle = "#9aa5b1";
  ctx.beginPath(); ctx.moveTo(left + 0.5, top); ctx.lineTo(left + 0.5, h - bottom); ctx.stroke();
  // lines
  series.forEach(function (s) {
    if (!s.points.length) return;
    ctx.strokeStyle = s.color; ctx.lineWidth = 2; ctx.beginPath();
    s.points.forEach(function (p, j) {
      if (j === 0) ctx.moveTo(x(p[0]), y(p[1])); else ctx.lineTo(x(p[0]), y(p[1]));
    });
    ctx.stroke();
    if (s.points.length === 1) {
      ctx.fillStyle = s.color; ctx.beginPath(); ctx.arc(x(s.points[0][0]), y(s.points[0][1]), 3, 0, 6.3); ctx.fill();
    }
  });
  // legend
  var lx = left + 8;
  series.forEach(function (s) {
    ctx.fillStyle = s.color; ctx.fillRect(lx, top + 2, 10, 10);
    ctx.fillStyle = "#1d232b"; ctx.fillText(s.name, lx + 14, top + 11);
    lx += 24 + ctx.measureText(s.name).width;
  });
  canvas.dataset.points = JSON.stringify(series.map(function (s) { return {name: s.name, points: s.points}; }));
}
