// The kafkatw console: pages drawn from /console/api/* (see kafkatw/web/console.py).
"use strict";

var API = "/console/api/";
var REFRESH_MS = 2000;
var HISTORY = 150;  // rate samples kept (5 minutes at 2 s)
// Rates: each broker's from two readings of its counters (read from its own /metrics by the
// console's broker), the cluster's the sum of the brokers' at each reading.
var rates = {messagesIn: [], bytesIn: [], bytesOut: [], topics: {}, brokers: {}};
var lastCounters = null;       // {time, c}: the cluster's counters (per topic)
var lastBrokerCounters = {};   // broker id -> {time, c}
var timer = null;
var adminMode = null;  // metrics.console.admin.enable, from the overview
var notice = null;     // the last admin action's outcome: {text, error}

function esc(s) {
  return String(s === null || s === undefined ? "" : s).replace(/[&<>"']/g, function (c) {
    return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c];
  });
}

function bytes(n) {
  if (n === null || n === undefined) return "–";
  var units = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + units[i];
}

function get(path) {
  return fetch(API + path, {cache: "no-store"}).then(function (r) {
    return r.json().then(function (body) {
      if (!r.ok) throw new Error(body.error || r.statusText);
      return body;
    });
  });
}

// --- admin mode: POST /console/api/admin/<action> with the console's cross-site guard header -----------

function post(action, body) {
  return fetch(API + "admin/" + action, {
    method: "POST", cache: "no-store", body: JSON.stringify(body),
    headers: {"Content-Type": "application/json", "X-Kafkatw-Console": "1"}
  }).then(function (r) {
    return r.json().then(function (answer) {
      if (!r.ok) throw new Error(answer.error || r.statusText);
      return answer;
    });
  });
}

function noticeHtml() {
  if (!adminMode || !notice) return "";
  return '<p id="admin-notice" class="' + (notice.error ? "error" : "ok") + '">' + esc(notice.text) + "</p>";
}

function adminForm(id, title, fields, button) {
  if (!adminMode) return "";
  return '<form class="browse admin" id="' + id + '"><strong>' + esc(title) + "</strong>" +
    fields.map(function (f) {
      return "<label>" + esc(f[1]) + '<input name="' + f[0] + '" size="' + (f[2] || 12) + '"></label>';
    }).join("") + '<button type="submit">' + esc(button) + "</button></form>";
}

function adminButton(id, label) {
  return adminMode ? '<button class="danger" id="' + id + '" type="button">' + esc(label) + "</button>" : "";
}

// Run an admin action, show its outcome, redraw the page (or go to `next`).
function act(action, body, done, next) {
  notice = {text: "…", error: false};
  return post(action, body).then(function (answer) {
    notice = {text: done(answer), error: false};
  }, function (e) {
    notice = {text: e.message, error: true};
  }).then(function () {
    if (next && !notice.error && location.hash !== next) {
      notice.keep = true;  // shown on the next page
      location.hash = next;
    } else {
      render();
    }
  });
}

function bindForm(id, handler) {
  var f = document.getElementById(id);
  if (!f) return;
  f.addEventListener("submit", function (ev) {
    ev.preventDefault();
    var values = {};
    Array.prototype.forEach.call(f.elements, function (e) { if (e.name) values[e.name] = e.value; });
    handler(values);
  });
}

function bindButton(id, question, handler) {
  var b = document.getElementById(id);
  if (b) b.addEventListener("click", function () { if (window.confirm(question)) handler(); });
}

// Whether the user is filling an admin form (the 2 s refresh would wipe it).
function adminBusy() {
  return Array.prototype.some.call(document.querySelectorAll("form.admin input"), function (e) {
    return e.value !== "" || e === document.activeElement;
  });
}

// A table; without rows, one row spanning it that says why it is empty (`empty`).
function table(headers, rows, empty) {
  return "<table><tr>" + headers.map(function (h) { return "<th>" + esc(h) + "</th>"; }).join("") + "</tr>" +
    (rows.length ? rows.map(function (r) { return "<tr>" + r.join("") + "</tr>"; }).join("") :
     '<tr><td class="empty" colspan="' + headers.length + '">' + esc(empty || "Nothing to show.") + "</td></tr>") +
    "</table>";
}
function td(v) { return "<td>" + esc(v) + "</td>"; }
function num(v) { return '<td class="num">' + esc(v === null || v === undefined ? "–" : v) + "</td>"; }

function card(label, value, warn, id) {
  return '<div class="card' + (warn ? " warn" : "") + '"><div class="label">' + esc(label) +
    '</div><div class="value"' + (id ? ' id="' + id + '"' : "") + ">" + esc(value) + "</div></div>";
}

// --- rates from the broker's cumulative counters -------------------------------------------

function push(list, value) { list.push(value); if (list.length > HISTORY) list.shift(); }

function rate(now, before, key, dt) { return Math.max(0, (now[key] - (before ? before[key] : 0)) / dt); }

function sample(overview) {
  if (adminMode !== overview.admin) {
    adminMode = overview.admin;
    document.getElementById("mode").textContent = adminMode ? "Admin console (metrics.console.admin.enable)" :
      "Read-only console";
  }
  var c = overview.counters, t = overview.time_ms;
  if (!lastCounters || t > lastCounters.time) {
    var sum = null;
    overview.brokers.forEach(function (b) {
      var last_ = lastBrokerCounters[b.id];
      if (!b.counters) return;  // not read this time: no sample of it
      if (last_ && t > last_.time) {
        var dt = (t - last_.time) / 1000, r = rates.brokers[b.id] =
          rates.brokers[b.id] || {messagesIn: [], bytesIn: [], bytesOut: [], topics: {}};
        var m = rate(b.counters, last_.c, "messages_in", dt), bi = rate(b.counters, last_.c, "bytes_in", dt),
            bo = rate(b.counters, last_.c, "bytes_out", dt);
        if (b.counters.messages_in < last_.c.messages_in) { m = bi = bo = 0; }  // it restarted
        push(r.messagesIn, [t, m]); push(r.bytesIn, [t, bi]); push(r.bytesOut, [t, bo]);
        sum = sum || {m: 0, bi: 0, bo: 0};
        sum.m += m; sum.bi += bi; sum.bo += bo;
      }
      lastBrokerCounters[b.id] = {time: t, c: b.counters};
    });
    if (sum) {
      push(rates.messagesIn, [t, sum.m]); push(rates.bytesIn, [t, sum.bi]); push(rates.bytesOut, [t, sum.bo]);
    }
    if (lastCounters) {
      var dt = (t - lastCounters.time) / 1000, prev = lastCounters.c;
      Object.keys(c.topics).forEach(function (topic) {
        var now = c.topics[topic], before = prev.topics[topic];
        var r = rates.topics[topic] = rates.topics[topic] || {messagesIn: [], bytesIn: [], bytesOut: []};
        push(r.messagesIn, [t, rate(now, before, "messages_in", dt)]);
        push(r.bytesIn, [t, rate(now, before, "bytes_in", dt)]);
        push(r.bytesOut, [t, rate(now, before, "bytes_out", dt)]);
      });
    }
    lastCounters = {time: t, c: c};
  }
  var status = document.getElementById("status");
  status.textContent = overview.ready ? "ready" : "not ready";
  status.className = "status " + (overview.ready ? "ok" : "bad");
  status.title = overview.problems.join("\n");
  document.getElementById("broker-id").textContent = overview.broker_id +
    (overview.principal ? " to " + overview.principal : "");
}

function last(series) { return series && series.length ? series[series.length - 1][1] : 0; }

// A rate cell: shown to 0.1, the exact value in data-rate (what the tests compare).
function rateCell(value, cls, unit) {
  return '<td class="num ' + cls + '" data-rate="' + value + '">' +
    esc(unit === "bytes" ? bytes(value) + "/s" : value.toFixed(1)) + "</td>";
}

function rateCharts(r, id) {
  return '<div class="charts">' +
    '<figure><figcaption>Produce: records in per second</figcaption><canvas class="chart" id="' + id +
    '-messages" width="420" height="180"></canvas></figure>' +
    '<figure><figcaption>Produce and consume: bytes per second</figcaption><canvas class="chart" id="' + id +
    '-bytes" width="420" height="180"></canvas></figure></div>';
}

function drawRates(r, id) {
  var m = document.getElementById(id + "-messages"), b = document.getElementById(id + "-bytes");
  if (m) lineChart(m, [{name: "records in/s", color: "#2b7bd6", points: r.messagesIn}], {unit: "records/s"});
  if (b) lineChart(b, [{name: "bytes in/s", color: "#2e8b57", points: r.bytesIn},
                       {name: "bytes out/s", color: "#d68a2b", points: r.bytesOut}], {unit: "bytes/s"});
}

// --- pages ------------------------------------------------------------------------------

var pages = {};

function brokerLink(id) {
  return '<a href="#/broker/' + encodeURIComponent(id) + '">' + esc(id) + "</a>";
}

pages.overview = function (main) {
  return get("overview").then(function (o) {
    sample(o);
    var unread = o.brokers.filter(function (b) { return b.error; });
    main.innerHTML = "<h1>Cluster " + esc(o.cluster_id) + "</h1>" +
      '<div class="cards">' +
      card("Health of broker " + o.broker_id, o.ready ? "ready" : "not ready", !o.ready) +
      card("Brokers", o.brokers.length) + card("Controller", o.controller_id) +
      card("Version", o.version) + card("Topics", o.topics) + card("Partitions", o.partitions) +
      card("Under-replicated", o.under_replicated_partitions, o.under_replicated_partitions > 0) +
      card("Offline", o.offline_partitions, o.offline_partitions > 0) +
      card("Records in/s (all brokers)", last(rates.messagesIn).toFixed(1), false, "cluster-records-in-rate") +
      card("Records in (all brokers)", c0(o.counters.messages_in), unread.length > 0, "cluster-records-in-total") +
      "</div>" +
      (o.problems.length ? '<p class="error" id="problems">' + o.problems.map(esc).join("<br>") + "</p>" : "") +
      (unread.length ? '<p class="error" id="unread">Not counted: ' + unread.map(function (b) {
        return "broker " + esc(b.id) + ": " + esc(b.error);
      }).join("; ") + "</p>" : "") +
      "<h2>Throughput of the cluster (sum over its brokers)</h2>" + rateCharts(rates, "cluster") +
      "<h2>Brokers</h2>" + table(["Id", "Host", "Port", "Rack", "Listeners", "Role", "Leader of", "Records in/s",
                                   "Bytes in/s", "Bytes out/s", "Records in"], o.brokers.map(function (b) {
        var r = rates.brokers[b.id] || {};
        return ['<td class="broker-id">' + brokerLink(b.id) + "</td>", td(b.host), num(b.port), td(b.rack || "–"),
                td(b.endpoints.join(" ")), td(b.controller ? "controller" : ""), num(b.leader_count),
                rateCell(last(r.messagesIn), "broker-records-in-rate"), rateCell(last(r.bytesIn), "", "bytes"),
                rateCell(last(r.bytesOut), "", "bytes"),
                '<td class="num broker-records-in-total">' + (b.counters ? esc(b.counters.messages_in) :
                  '<span class="error" title="' + esc(b.error) + '">not read</span>') + "</td>"];
      }), "No broker is registered in /brokers/ids.");
    drawRates(rates, "cluster");
  });
};

function c0(v) { return v === null || v === undefined ? "–" : String(v); }

pages.broker = function (main, id) {
  return get("broker?id=" + encodeURIComponent(id)).then(function (b) {
    var r = rates.brokers[b.id] || {messagesIn: [], bytesIn: [], bytesOut: []};
    main.innerHTML = "<h1>Broker " + esc(b.id) + (b.controller ? " (controller)" : "") + "</h1>" +
      "<p>" + esc(b.endpoints.join(" ")) + (b.rack ? " · rack " + esc(b.rack) : "") + "</p>" +
      (b.error ? '<p class="error" id="unread">Its counters could not be read: ' + esc(b.error) + "</p>" : "") +
      '<div class="cards">' +
      card("Records in/s", last(r.messagesIn).toFixed(1), false, "broker-records-in-rate") +
      card("Bytes in/s", bytes(last(r.bytesIn)) + "/s") + card("Bytes out/s", bytes(last(r.bytesOut)) + "/s") +
      card("Records in", b.counters ? c0(b.counters.messages_in) : "–", !!b.error, "broker-records-in-total") +
      card("Leader of", b.leader_count) + card("Replicas", b.partition_count) + "</div>" +
      "<h2>Throughput of broker " + esc(b.id) + "</h2>" + rateCharts(r, "broker") +
      "<h2>Partitions with a replica here</h2>" +
      table(["Topic", "Partition", "Role", "Leader", "Replicas", "ISR", "In sync"], b.partitions.map(function (p) {
        return ['<td><a href="#/topic/' + encodeURIComponent(p.topic) + '">' + esc(p.topic) + "</a></td>",
                num(p.partition), td(p.role), num(p.leader), td(p.replicas.join(",")), td(p.isr.join(",")),
                td(p.in_sync ? "yes" : "no")];
      }), "Broker " + b.id + " holds no replica of any topic you may see: it leads and follows nothing (a new" +
          " topic or kafkatw reassign-partitions gives it some).");
    drawRates(r, "broker");
  });
};

pages.topics = function (main) {
  return get("topics").then(function (t) {
    main.innerHTML = "<h1>Topics</h1>" + noticeHtml() +
      adminForm("create-topic", "New topic", [["name", "Name", 20], ["partitions", "Partitions", 4],
                                              ["replication_factor", "Replication factor", 4]], "Create") + table(
      ["Topic", "Partitions", "Replication", "Under-replicated", "Offline", "Size on broker " + t.broker_id,
       "Records in/s", "Bytes out/s"],
      t.topics.map(function (x) {
        var r = rates.topics[x.name] || {messagesIn: [], bytesOut: []};
        return ['<td><a href="#/topic/' + encodeURIComponent(x.name) + '">' + esc(x.name) + "</a></td>",
                num(x.partitions), num(x.replication_factor), num(x.under_replicated), num(x.offline),
                num(bytes(x.size_bytes)), rateCell(last(r.messagesIn), "topic-records-in-rate"),
                rateCell(last(r.bytesOut), "", "bytes")];
      }), "No topics" + (t.principal ? " that " + t.principal + " may Describe." :
                         ": create one with kafkatw topics --create, a producer (auto.create.topics.enable)" +
                         (adminMode ? " or the form above." : ".")));
    bindForm("create-topic", function (v) {
      act("create-topic", {name: v.name, partitions: v.partitions, replication_factor: v.replication_factor},
          function (a) { return "Created topic " + a.topic + "."; }, "#/topic/" + encodeURIComponent(v.name));
    });
  });
};

pages.topic = function (main, name) {
  return get("topic?name=" + encodeURIComponent(name)).then(function (t) {
    var r = rates.topics[name] || {messagesIn: [], bytesIn: [], bytesOut: []};
    main.innerHTML = "<h1>Topic " + esc(t.name) + '</h1><p>TopicId: <code id="topic-id">' + esc(t.topic_id) + "</code>" +
      ' · <a href="#/messages/' + encodeURIComponent(name) + '/0">browse messages</a> ' +
      adminButton("delete-topic", "Delete topic") + "</p>" + noticeHtml() +
      adminForm("produce", "Produce a record", [["key", "Key (text)", 16], ["value", "Value (text)", 40],
                                               ["partition", "Partition (optional)", 4]], "Produce") +
      rateCharts(r, "topic") +
      "<h2>Partitions</h2>" + table(["Partition", "Leader", "Replicas", "ISR", "Log start", "High watermark",
                                     "Log end", "Size on broker " + t.broker_id, "Segments"],
        t.partitions.map(function (p) {
          return [num(p.partition), num(p.leader), td(p.replicas.join(",")), td(p.isr.join(",")),
                  num(p.log_start_offset), num(p.high_watermark), num(p.log_end_offset), num(bytes(p.size_bytes)),
                  num(p.segments)];
        }), "The topic has no partitions.") +
      (t.offsets_error ? '<p class="error">' + esc(t.offsets_error) + "</p>" : "") +
      "<h2>Configs</h2>" + (t.configs === null ? "<p>Not shown: DescribeConfigs on this topic is not allowed.</p>" :
        table(["Name", "Value", "Source"], t.configs.map(function (c) {
          return [td(c.name), td(c.value), td(c.override ? "topic override" : "default")];
        }), "No configs."));
    drawRates(r, "topic");
    bindForm("produce", function (v) {
      act("produce", {topic: name, key: v.key, value: v.value, partition: v.partition}, function (a) {
        return "Produced to " + a.topic + "-" + a.partition + " at offset " + a.offset + ".";
      });
    });
    bindButton("delete-topic", "Delete topic " + name + " and all its records?", function () {
      act("delete-topic", {name: name}, function (a) { return "Deleted topic " + a.topic + "."; }, "#/topics");
    });
  });
};

function renderValue(v, inline) {
  if (v.null) return '<span class="tag">null</span>';
  if (inline && v.text !== undefined) return "<span>" + esc(v.text) + "</span>";
  if (v.json !== undefined) return '<span class="tag">json</span><pre>' + esc(JSON.stringify(v.json, null, 1)) + "</pre>";
  if (v.hex !== undefined) return '<span class="tag">hex</span><pre>' + esc(v.hex) + "</pre>";
  return "<pre>" + esc(v.text) + "</pre>";
}

pages.messages = function (main, topic, partition) {
  var params = new URLSearchParams(location.hash.split("?")[1] || "");
  topic = topic || params.get("topic") || "";
  partition = partition || params.get("partition") || "0";
  var offset = params.get("offset") || "", timestamp = params.get("timestamp") || "";
  var form = '<form class="browse" id="browse">' +
    '<label>Topic<input name="topic" value="' + esc(topic) + '"></label>' +
    '<label>Partition<input name="partition" size="4" value="' + esc(partition) + '"></label>' +
    '<label>From offset (-2 earliest, -1 latest)<input name="offset" size="10" value="' + esc(offset) + '"></label>' +
    '<label>or from time (ISO or ms)<input name="timestamp" size="24" value="' + esc(timestamp) + '"></label>' +
    '<button type="submit">Show</button></form>';
  if (!topic) {
    main.innerHTML = "<h1>Messages</h1>" + form;
    bindBrowse();
    return Promise.resolve();
  }
  var query = "messages?topic=" + encodeURIComponent(topic) + "&partition=" + encodeURIComponent(partition) +
    "&limit=50";
  if (timestamp) {
    var ms = /^\d+$/.test(timestamp) ? timestamp : String(Date.parse(timestamp));
    query += "&timestamp=" + encodeURIComponent(ms);
  } else if (offset) {
    query += "&offset=" + encodeURIComponent(offset);
  }
  return get(query).then(function (m) {
    main.innerHTML = "<h1>Messages of " + esc(topic) + "-" + esc(partition) + "</h1>" + form +
      "<p>Offsets " + m.log_start_offset + " to " + (m.high_watermark - 1) + " readable; showing " +
      m.records.length + " from " + m.from_offset + ', read from <span id="read-from">broker ' + esc(m.leader) +
      "</span>, the leader.</p>" +
      '<div id="records">' + table(["Offset", "Timestamp", "Key", "Value", "Headers"], m.records.map(function (r) {
        return ['<td class="num record-offset">' + r.offset + "</td>",
                "<td>" + esc(new Date(r.timestamp_ms).toISOString()) + '<br><span class="tag">' +
                esc(r.timestamp_type) + "</span></td>",
                "<td>" + renderValue(r.key) + "</td>", '<td class="record-value">' + renderValue(r.value) + "</td>",
                "<td>" + r.headers.map(function (h) {
                  return '<div class="header">' + esc(h.key) + ": " + renderValue(h.value, true) + "</div>";
                }).join("") +
                "</td>"];
      }), m.high_watermark <= m.log_start_offset ?
          "The partition holds no records (log start offset and high watermark are both " + m.high_watermark + ")." :
          "No records from offset " + m.from_offset + ": the readable ones are " + m.log_start_offset + " to " +
          (m.high_watermark - 1) + " (control records of transactions are not shown).") + "</div>";
    bindBrowse();
  }, function (e) {
    main.innerHTML = "<h1>Messages</h1>" + form + '<p class="error">' + esc(e.message) + "</p>";
    bindBrowse();
  });
};

function bindBrowse() {
  var f = document.getElementById("browse");
  f.addEventListener("submit", function (ev) {
    ev.preventDefault();
    var p = new URLSearchParams();
    ["topic", "partition", "offset", "timestamp"].forEach(function (k) { if (f[k].value) p.set(k, f[k].value); });
    location.hash = "#/messages?" + p.toString();
  });
}

pages.groups = function (main) {
  return get("groups").then(function (g) {
    main.innerHTML = "<h1>Consumer groups</h1>" + noticeHtml() +
      (g.computed_ms ? "<p>Lag computed " + esc(new Date(g.computed_ms).toISOString()) + ".</p>" :
       "<p>Lag not computed yet.</p>") +
      table(["Group", "Kind", "Partitions", "Lag", "Coordinator"], g.groups.map(function (x) {
        return ['<td><a href="#/group/' + encodeURIComponent(x.group) + '">' + esc(x.group) + "</a></td>",
                td(x.kind === "zookeeper" ? "ZooKeeper (paper)" : "group coordinator"), num(x.partitions),
                '<td class="num group-lag">' + esc(x.lag) + "</td>", num(x.coordinator)];
      }), g.computed_ms ? "No consumer groups have committed offsets or members." :
          "No groups yet: they are read every metrics.lag.interval.ms.");
  });
};

pages.group = function (main, id) {
  return get("group?id=" + encodeURIComponent(id)).then(function (g) {
    main.innerHTML = "<h1>Group " + esc(g.group) + " " + adminButton("delete-group", "Delete group") + "</h1>" +
      noticeHtml() +
      '<div class="cards">' + card("Kind", g.kind) + card("State", g.state || "–") +
      card("Members", g.members.length) + '<div class="card"><div class="label">Lag</div><div class="value" ' +
      'id="group-total-lag">' + esc(g.lag) + "</div></div></div>" +
      "<h2>Lag over time</h2><canvas class=\"chart\" id=\"lag-chart\" width=\"860\" height=\"200\"></canvas>" +
      "<h2>Members</h2>" + table(["Member", "Client id", "Host", "Assignment"], g.members.map(function (m) {
        return [td(m.member_id), td(m.client_id), td(m.host), td(m.assignment.join(", "))];
      }), "No members: the group is " + (g.state || "empty") + " (its committed offsets are kept).") +
      "<h2>Partitions</h2>" + table(["Topic", "Partition", "Current offset", "Log end offset", "Lag"],
        g.partitions.map(function (p) {
          return [td(p.topic), num(p.partition), num(p.current_offset), num(p.log_end_offset),
                  '<td class="num partition-lag">' + esc(p.lag === null ? "–" : p.lag) + "</td>"];
        }), "The group has committed no offsets of a topic you may see.");
    // the group's total, then its partitions (the 6 with the most lag now)
    var palette = ["#2b7bd6", "#2e8b57", "#d68a2b", "#8e44ad", "#16a085", "#7f8c8d"];
    var series = [{name: "total", color: "#c0392b",
                   points: g.history.map(function (h) { return [h.time_ms, h.lag]; })}];
    var names = Object.keys(g.partition_history);
    if (names.length > 1) {
      names.sort(function (a, b) {
        var pa = g.partition_history[a], pb = g.partition_history[b];
        return pb[pb.length - 1][1] - pa[pa.length - 1][1];
      });
      names.slice(0, palette.length).forEach(function (name, i) {
        series.push({name: name, color: palette[i], points: g.partition_history[name]});
      });
    }
    lineChart(document.getElementById("lag-chart"), series, {unit: "records"});
    bindButton("delete-group", "Delete group " + id + " and its committed offsets?", function () {
      act("delete-group", {group: id}, function (a) { return "Deleted group " + a.group + "."; }, "#/groups");
    });
  });
};

// --- routing and refresh -------------------------------------------------------------------

function route() {
  var hash = location.hash.replace(/^#\/?/, "") || "overview";
  var parts = hash.split("?")[0].split("/").map(decodeURIComponent);
  var page = pages[parts[0]] ? parts[0] : "overview";
  document.querySelectorAll("header nav a").forEach(function (a) {
    var p = a.dataset.page;
    a.className = (p === page || (p === "topics" && page === "topic") || (p === "groups" && page === "group") ||
                   (p === "overview" && page === "broker")) ?
      "active" : "";
  });
  return {page: page, args: parts.slice(1)};
}

function render() {
  if (adminMode === null) return get("overview").then(sample, function () { adminMode = false; }).then(render);
  var r = route(), main = document.getElementById("main");
  document.body.dataset.page = r.page;
  return pages[r.page].apply(null, [main].concat(r.args)).then(function () {
    document.body.dataset.loaded = String(Date.now());
  }, function (e) {
    main.innerHTML = '<p class="error">' + esc(e.message) + "</p>";
  });
}

function tick() {
  var r = route();
  var poll = r.page === "overview" ? Promise.resolve() : get("overview").then(sample);
  poll.then(function () {
    // the message browser keeps its form; other pages redraw with fresh data
    return r.page === "messages" || adminBusy() ? null : render();
  }).catch(function () {}).then(function () { timer = setTimeout(tick, REFRESH_MS); });
}

window.addEventListener("hashchange", function () {
  if (notice && notice.keep) notice.keep = false; else notice = null;
  render();
});
render().then(function () { timer = setTimeout(tick, REFRESH_MS); });
