/*
 * rdmad's Cockpit page: devices, ports, health and changes through rdmad's
 * D-Bus API (org.rdmad1, see dbusapi/org.rdmad1.xml).
 *
 * Every string from the host (device names above all) is hostile input: the
 * page builds its DOM with createElement and sets text with textContent,
 * never innerHTML. No build step: this file is served as it is.
 */
"use strict";

(function () {
    const BUS_NAME = "org.rdmad1";
    const ROOT = "/org/rdmad1";
    const MANAGER = "org.rdmad1.Manager";
    const SVG_NS = "http://www.w3.org/2000/svg";

    const $ = id => document.getElementById(id);

    /* el("td", {class: "x"}, "text", child...): strings become text nodes. */
    function el(tag, attrs, ...children) {
        const e = document.createElement(tag);
        setAttrs(e, attrs);
        append(e, children);
        return e;
    }

    function svg(tag, attrs, ...children) {
        const e = document.createElementNS(SVG_NS, tag);
        setAttrs(e, attrs);
        append(e, children);
        return e;
    }

    function setAttrs(e, attrs) {
        for (const k in attrs || {}) {
            if (attrs[k] === undefined || attrs[k] === null || attrs[k] === false)
                continue;
            e.setAttribute(k, String(attrs[k]));
        }
    }

    function append(e, children) {
        for (const c of children) {
            if (c === undefined || c === null || c === false)
                continue;
            e.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
        }
    }

    function clear(e) {
        while (e.firstChild)
            e.removeChild(e.firstChild);
    }

    /* ---- D-Bus ---- */

    /*
     * Two channels: the bridge's cache of a channel that watches the
     * ObjectManager's namespace (devices, ports) takes GetManagedObjects'
     * answer for the whole tree, and GetManagedObjects lists only the
     * objects below /org/rdmad1, never the Manager at /org/rdmad1 itself
     * (as the D-Bus specification says); on the same channel the Manager
     * proxy stays empty. Its own channel introspects it and reads it.
     */
    const client = cockpit.dbus(BUS_NAME, { bus: "system", superuser: "try" });
    const managerClient = cockpit.dbus(BUS_NAME, { bus: "system", superuser: "try" });
    const manager = managerClient.proxy(MANAGER, ROOT);
    const devices = client.proxies("org.rdmad1.Device", ROOT);
    const ports = client.proxies("org.rdmad1.Port", ROOT);

    let readOnly = true; /* until cockpit.permission says otherwise */
    let deniedByRdmad = false;
    let connected = false;

    function call(method, signature, args) {
        return managerClient.call(ROOT, MANAGER, method, args, { type: signature });
    }

    /* sentence turns an error of a call into what an operator reads. */
    function sentence(ex, what) {
        const name = (ex && ex.name) || "";
        const msg = (ex && (ex.message || ex.problem)) || String(ex);
        if (name === "org.freedesktop.DBus.Error.AccessDenied" || /\.NotAuthorized$/.test(name) ||
            (ex && ex.problem === "access-denied")) {
            deniedByRdmad = true;
            applyAccess();
            return "Administrative access required: rdmad refused to " + what +
                " for this session. Turn on administrative access to make changes.";
        }
        switch (name) {
        case "org.rdmad1.Error.NoSuchDevice":
            return "There is no RDMA device of that name (it may just have been removed): " + msg;
        case "org.rdmad1.Error.NoSuchPort":
            return "That device has no port of that number: " + msg;
        case "org.rdmad1.Error.NoSuchLink":
            return "No soft link of that name is declared: " + msg;
        case "org.rdmad1.Error.Failed":
            return "The kernel refused to " + what + "; nothing was left half-applied. rdmad said: " + msg;
        case "org.rdmad1.Error.NextBoot":
            return "Saved for the next boot, but the running kernel refused the switch now: " + msg;
        case "org.rdmad1.Error.Busy":
            return "rdmad is busy; try again in a moment (" + msg + ").";
        case "org.rdmad1.Error.NotAllowed":
            return "This host's configuration does not let changes be made here: " + msg;
        case "org.rdmad1.Error.Config":
            return "The configuration files have an error; the policy in force stays (" + policyText(manager) + "): " + msg;
        case "org.freedesktop.DBus.Error.InvalidArgs":
            return "rdmad refused a value: " + msg;
        case "org.freedesktop.DBus.Error.ServiceUnknown":
        case "org.freedesktop.DBus.Error.NameHasNoOwner":
            return "rdmad is not running on this host (nobody owns org.rdmad1 on the system bus).";
        case "org.freedesktop.DBus.Error.NoReply":
        case "org.freedesktop.DBus.Error.Timeout":
            return "rdmad did not answer in time; it may be busy with a long reconcile. Try again.";
        }
        return "Could not " + what + ": " + msg;
    }

    function showResult(id, text, kind) {
        const e = $(id);
        e.textContent = text;
        e.className = "result " + (kind || "");
    }

    function banner(text) {
        const b = $("banner");
        b.textContent = text || "";
        b.hidden = !text;
    }

    /* ---- administrative access ---- */

    const permission = cockpit.permission({ admin: true });

    /* applyControls enables what this session may do: nothing read-only;
     * with [api] changes = "none" (Manager.APIChanges) no declaration,
     * with "runtime" no "keep after reboot". Reconcile always works. */
    function applyControls() {
        const api = (manager.valid && manager.APIChanges) || "all";
        for (const e of document.querySelectorAll(".admin-only"))
            e.disabled = readOnly;
        for (const e of document.querySelectorAll(".declares"))
            e.disabled = readOnly || api === "none";
        for (const e of document.querySelectorAll(".persist")) {
            e.disabled = readOnly || api !== "all";
            if (api !== "all")
                e.checked = false;
        }
        const note = $("api-note");
        const where = manager.valid && manager.APIChangesSource ? " (" + manager.APIChangesSource + ")" : "";
        if (api === "none")
            note.textContent = "This host takes no changes from here: [api] changes = \"none\"" + where + ". Its configuration files alone declare the policy.";
        else if (api === "runtime")
            note.textContent = "Changes made here last until rdmad restarts: [api] changes = \"runtime\"" + where + " does not let them be kept after reboot.";
        note.hidden = api === "all";
    }

    function applyAccess() {
        readOnly = permission.allowed !== true || deniedByRdmad;
        document.body.classList.toggle("read-only", readOnly);
        applyControls();
        $("readonly-note").hidden = !readOnly;
        $("access").textContent = readOnly
            ? "Read-only: administrative access required to change the host."
            : "Administrative access: changes are made as root.";
        $("access").className = "access " + (readOnly ? "access-ro" : "access-rw");
        render();
    }
    permission.addEventListener("changed", () => { deniedByRdmad = false; applyAccess() });

    /* ---- model ---- */

    function byName(a, b) {
        return a.Name < b.Name ? -1 : a.Name > b.Name ? 1 : 0;
    }

    function validDevices() {
        return Object.keys(devices).map(p => devices[p]).filter(d => d && d.valid && d.Name !== undefined).sort(byName);
    }

    function portsOf(dev) {
        const list = (dev.Ports || []).map(p => ports[p]).filter(p => p && p.valid);
        return list.sort((a, b) => a.Number - b.Number);
    }

    /* A port's settings as rdmad's parts recorded them (Port.Settings,
     * "a(sssssss)": name, title, declared, source, observed, state, why).
     * The page decides nothing about a setting itself: it shows what the
     * records say, whatever the setting, so a new one needs no change here. */
    function settings(p) {
        return (p.Settings || []).map(([name, title, declaredValue, source, observed, state, why]) =>
            ({ name, title, declared: declaredValue, source, observed, state, why }));
    }

    /* applies: declared, and applies to the port. */
    function applies(s) {
        return s.state !== "undeclared" && s.state !== "not-applicable";
    }

    /* drift lists the titles of the declared settings that do not hold. */
    function drift(p) {
        return settings(p).filter(s => applies(s) && s.state !== "holds").map(s => s.title);
    }

    /* declared: some declared setting applies to the port. */
    function declared(p) {
        return settings(p).some(applies);
    }

    /* shortSource shows "file:line" entries by file name (the whole path
     * is the cell's title): "/etc/rdma/rdmad.d/50-roce.toml:6" -> "50-roce.toml:6". */
    function shortSource(src) {
        return (src || "").split(", ").map(e => e.replace(/^.*\//, "")).join(", ");
    }

    /* corrections: how many times rdmad put a setting of the port back
     * since it started (Port.Corrected, by setting name). */
    function corrections(p, name) {
        const n = (p.Corrected || {})[name];
        return Number.isInteger(n) ? n : 0;
    }

    /* settingsCell: one line per setting, the kernel's value / the
     * declared one, marked by whether it holds, with a badge counting
     * rdmad's corrections of it: another process keeps changing it. */
    function settingsCell(p) {
        const lines = settings(p).filter(s => s.state !== "not-applicable").map(s => {
            const kind = s.state === "holds" ? "ok" : s.state === "undeclared" ? "none" : "fail";
            const title = [s.source ? "declared at " + s.source : "not declared", s.state, s.why].filter(Boolean).join(": ");
            const n = corrections(p, s.name);
            return el("div", { class: "setting setting-" + kind, title, "data-setting": s.name },
                el("span", { class: "setting-title" }, s.title + " "),
                s.observed || "—", el("span", { class: "sep" }, " / "), s.declared || "—",
                n > 0 ? el("span", { class: "badge badge-warn corrected", "data-corrected": String(n),
                    title: "another process changed it and rdmad put it back, " + n + " time" + (n === 1 ? "" : "s") + " since rdmad started" },
                "corrected " + n + "×") : null);
        });
        return el("td", { class: "pair" }, ...lines);
    }

    /* sourcesOf: the distinct files:lines that declare the port's settings. */
    function sourcesOf(p) {
        const seen = [];
        for (const s of settings(p))
            if (s.source && !seen.includes(s.source))
                seen.push(s.source);
        return seen.join(", ");
    }

    function stateClass(state) {
        if (state === "ACTIVE")
            return "ok";
        if (state === "INIT" || state === "ARMED")
            return "warn";
        if (!state)
            return "unknown";
        return "fail";
    }

    /* ---- overview ---- */

    function badge(kind, text, title) {
        return el("span", { class: "badge badge-" + kind, title: title || null }, text);
    }

    function renderOverview(devs) {
        const head = $("ports-head");
        clear(head);
        const cols = ["Device", "Port", "Transport", "State", "Rate", "Netdev",
            "Settings (now / declared)", "Declared in", "Drift"];
        head.appendChild(el("tr", {}, ...cols.map(c => el("th", { scope: "col" }, c))));

        const body = $("ports-body");
        clear(body);
        for (const d of devs) {
            const ps = portsOf(d);
            const devCell = el("th", { scope: "row", class: "device", rowspan: Math.max(ps.length, 1) },
                el("span", { class: "devname" }, d.Name),
                el("span", { class: "sub" }, [d.Driver, d.PCIAddress || (d.Parent ? "on " + d.Parent : "")].filter(Boolean).join(" · ")),
                d.Error ? el("span", { class: "error-text" }, d.Error) : null);
            if (ps.length === 0) {
                body.appendChild(el("tr", { "data-device": d.Name }, devCell,
                    el("td", { colspan: cols.length - 1, class: "empty" }, "no ports")));
                continue;
            }
            ps.forEach((p, i) => {
                const dr = drift(p);
                let driftCell;
                if (dr.length)
                    driftCell = badge("fail", "drift: " + dr.join(", "), "the kernel value differs from the declared one, or could not be read or written");
                else if (declared(p))
                    driftCell = badge("ok", "✓ as declared");
                else if (settings(p).some(s => s.state === "not-applicable"))
                    driftCell = badge("none", "not applicable", "a rule selects this port, but its settings do not apply to a " + (p.Transport || "such") + " port");
                else
                    driftCell = badge("none", "not declared");
                const src = sourcesOf(p);
                const cells = [
                    el("td", { class: "num" }, String(p.Number)),
                    el("td", {}, p.Transport || ""),
                    el("td", {}, badge(stateClass(p.State), p.State || "unknown"),
                        p.PhysState ? el("span", { class: "sub" }, p.PhysState) : null),
                    el("td", {}, p.Rate || ""),
                    el("td", {}, (p.Netdevs || []).join(", ")),
                    settingsCell(p),
                    el("td", { class: "source", title: src || null }, shortSource(src)),
                ];
                cells.push(el("td", {}, driftCell, p.Error ? el("span", { class: "error-text" }, p.Error) : null));
                const tr = el("tr", { "data-device": d.Name, "data-port": String(p.Number) });
                if (i === 0)
                    tr.appendChild(devCell);
                append(tr, cells);
                body.appendChild(tr);
            });
        }
        $("no-devices").hidden = devs.length > 0 || !connected;
    }

    /* ---- header and manager ---- */

    function renderSummary(devs) {
        if (!connected)
            return;
        if (!manager.valid) {
            $("summary").textContent = "rdmad is not running on this host (nobody owns org.rdmad1 on the system bus).";
            return;
        }
        let nports = 0;
        let ndrift = 0;
        for (const d of devs)
            for (const p of portsOf(d)) {
                nports++;
                if (drift(p).length)
                    ndrift++;
            }
        const last = manager.LastReconcile ? new Date(manager.LastReconcile / 1000).toLocaleString() : "never";
        const parts = ["rdmad " + (manager.Version || "?"),
            devs.length + " device" + (devs.length === 1 ? "" : "s") + ", " + nports + " port" + (nports === 1 ? "" : "s"),
            ndrift ? ndrift + " drifting" : "no drift",
            "last reconcile " + last + ": " + (manager.LastResult || "")];
        const policy = policyText(manager);
        if (policy)
            parts.push("in force: " + policy);
        $("summary").textContent = parts.join(" · ");
        const problems = [];
        if (manager.ConfigError)
            problems.push("Configuration error; in force instead: " + policy + ". " + manager.ConfigError);
        if (manager.LastGoodError)
            problems.push("The last good configuration (applied when the files do not load at start): " + manager.LastGoodError);
        banner(problems.join(" "));
    }

    /* Which policy rdmad applies, as the Manager publishes it. */
    function policyText(m) {
        switch (m.PolicyInForce) {
        case "files":
            return "the configuration files";
        case "last-good":
            return m.PolicySaved ? "the last good configuration saved " + new Date(m.PolicySaved / 1000).toLocaleString() :
                "the last configuration that loaded (not saved)";
        case "nothing":
            return "nothing declared (the files do not load and no last good configuration can be used)";
        }
        return "";
    }

    function renderLinks() {
        const body = $("links-body");
        clear(body);
        const links = manager.valid ? (manager.Links || []) : [];
        if (!links.length)
            body.appendChild(el("tr", {}, el("td", { colspan: 5, class: "empty" }, "No soft link is declared.")));
        for (const l of links) {
            const [name, type, netdev, source] = l;
            const persist = el("input", { type: "checkbox", class: "admin-only declares persist", checked: source !== "runtime" });
            const del = el("button", { type: "button", class: "admin-only declares danger" }, "Delete");
            del.addEventListener("click", () => {
                showResult("link-result", "Deleting " + name + "…", "busy");
                call("DeleteLink", "sb", [name, persist.checked])
                        .then(() => showResult("link-result", "Deleted " + name + (persist.checked ? " (also after reboot)." : " (until rdmad restarts)."), "ok"))
                        .catch(ex => showResult("link-result", sentence(ex, "delete " + name), "fail"));
            });
            body.appendChild(el("tr", { "data-link": name }, el("td", {}, name), el("td", {}, type), el("td", {}, netdev),
                el("td", { class: "source" }, source),
                el("td", {}, el("label", { class: "check" }, persist, " keep after reboot"), " ", del)));
        }
        $("netns-current").textContent = (manager.valid && manager.NetnsMode) || "not managed by rdmad";
        if (manager.valid && manager.NetnsMode && document.activeElement !== $("netns-mode"))
            $("netns-mode").value = manager.NetnsMode;
    }

    function renderPortChoice(devs) {
        for (const id of ["roce-port", "qos-port"]) {
            const sel = $(id);
            const before = sel.value;
            clear(sel);
            for (const d of devs) {
                const ps = portsOf(d).filter(p => p.Transport === "roce");
                if (!ps.length)
                    continue;
                sel.appendChild(el("option", { value: JSON.stringify([d.Name, 0]) }, d.Name + " (every RoCE port)"));
                for (const p of ps)
                    sel.appendChild(el("option", { value: JSON.stringify([d.Name, p.Number]) }, d.Name + " port " + p.Number));
            }
            if (before && Array.from(sel.options).some(o => o.value === before))
                sel.value = before;
        }
    }

    /* ---- picture ---- */

    /* fit shortens a label to its box (the whole text is in the title). */
    function fit(text, width) {
        const max = Math.floor((width - 16) / 7.5);
        return text.length > max ? text.slice(0, max - 1) + "…" : text;
    }

    function renderPicture(devs) {
        const box = $("topology");
        clear(box);
        const rowH = 40;
        const colX = [10, 230, 420, 610];
        const boxW = [200, 170, 170, 170];
        const nodes = [];
        const edges = [];
        const netdevRow = new Map();
        let row = 0;
        for (const d of devs) {
            const ps = portsOf(d);
            const first = row;
            for (const p of ps) {
                const state = p.State || "unknown";
                nodes.push({ col: 1, row, text: "port " + p.Number + " " + state, kind: stateClass(p.State), dashed: state !== "ACTIVE", title: d.Name + " port " + p.Number + ": " + state + (p.PhysState ? " (" + p.PhysState + ")" : "") });
                edges.push([0, first, 1, row]);
                for (const n of p.Netdevs || []) {
                    if (!netdevRow.has(n)) {
                        netdevRow.set(n, row);
                        nodes.push({ col: 2, row, text: n, kind: "net", title: "network interface " + n });
                    }
                    edges.push([1, row, 2, netdevRow.get(n)]);
                }
                row++;
            }
            if (!ps.length)
                row++;
            const kind = d.Error ? "fail" : "dev";
            nodes.push({ col: 0, row: first, span: Math.max(row - first, 1), text: d.Name, sub: (d.Transports || []).join(", "), kind, title: d.Name + (d.Error ? ": " + d.Error : "") });
        }
        const links = manager.valid ? (manager.Links || []) : [];
        for (const [name, type, netdev] of links) {
            if (!netdevRow.has(netdev)) {
                netdevRow.set(netdev, row);
                nodes.push({ col: 2, row, text: netdev + " (absent)", kind: "fail", dashed: true, title: "network interface " + netdev + " is not present" });
                row++;
            }
            const present = devs.some(d => d.Name === name);
            nodes.push({ col: 3, row: netdevRow.get(netdev), text: name + " (" + type + ")" + (present ? "" : " missing"), kind: present ? "ok" : "fail", dashed: !present, title: "soft link " + name + " on " + netdev + (present ? "" : ", not present") });
            edges.push([2, netdevRow.get(netdev), 3, netdevRow.get(netdev)]);
        }
        const height = Math.max(row, 1) * rowH + 30;
        const width = colX[3] + boxW[3] + 10;
        const s = svg("svg", { viewBox: "0 0 " + width + " " + height, width, height, role: "img", "aria-label": "RDMA topology: devices, ports, network interfaces and soft links" });
        ["device", "ports", "netdevs", "soft links"].forEach((h, i) =>
            s.appendChild(svg("text", { x: colX[i], y: 14, class: "col-head" }, h)));
        const top = 24;
        const midY = (r, span) => top + r * rowH + ((span || 1) * rowH - 8) / 2;
        for (const [c1, r1, c2, r2] of edges) {
            const n1 = nodes.find(n => n.col === c1 && n.row <= r1 && r1 < n.row + (n.span || 1));
            s.appendChild(svg("line", { x1: colX[c1] + boxW[c1], y1: n1 ? midY(n1.row, n1.span) : midY(r1), x2: colX[c2], y2: midY(r2), class: "edge" }));
        }
        for (const n of nodes) {
            const h = (n.span || 1) * rowH - 8;
            const g = svg("g", { class: "node node-" + n.kind + (n.dashed ? " dashed" : "") });
            g.appendChild(svg("title", {}, n.title || n.text));
            g.appendChild(svg("rect", { x: colX[n.col], y: top + n.row * rowH, width: boxW[n.col], height: h, rx: 4 }));
            const y = top + n.row * rowH + h / 2 + (n.sub ? -2 : 4);
            g.appendChild(svg("text", { x: colX[n.col] + 8, y }, fit(n.text, boxW[n.col])));
            if (n.sub)
                g.appendChild(svg("text", { x: colX[n.col] + 8, y: y + 14, class: "sub" }, n.sub));
            s.appendChild(g);
        }
        box.appendChild(s);
    }

    /* ---- health ---- */

    /* Ignored findings ([doctor] ignore) come after the warnings: listed,
       with what they were and the entry that ignores them, but not counted. */
    const SEVERITIES = [["fail", "Failing"], ["warn", "Warnings"], ["ignored", "Ignored"], ["ok", "Passing"]];

    function subjectText(s) {
        if (!s || s.kind === "host")
            return "host";
        const parts = [];
        if (s.device)
            parts.push(s.device + (s.port ? "/" + s.port : ""));
        if (s.netdev)
            parts.push(s.netdev);
        return parts.join(" ") || s.kind;
    }

    function diagnose() {
        const box = $("findings");
        return call("Diagnose", "", [])
                .then(([json]) => {
                    const findings = JSON.parse(json);
                    clear(box);
                    for (const [sev, title] of SEVERITIES) {
                        const list = findings.filter(f => f.severity === sev);
                        if (!list.length)
                            continue;
                        const ul = el("ul", { class: "findings" });
                        for (const f of list)
                            ul.appendChild(el("li", { class: "finding finding-" + sev, "data-id": f.id },
                                badge(sev, sev), " ",
                                el("span", { class: "subject" }, subjectText(f.subject)), ": ",
                                el("span", { class: "text" }, f.finding),
                                sev === "ignored" ? el("div", { class: "ignored-by" },
                                                       (f.ignored_severity || "warn") + ", ignored by ", el("code", {}, f.ignored_by || "")) : null,
                                f.fix ? el("div", { class: "fix" }, "Fix: ", el("code", {}, f.fix)) : null));
                        box.appendChild(el("section", { class: "severity severity-" + sev, "data-severity": sev },
                            el("h2", {}, title + " (" + list.length + ")"), ul));
                    }
                })
                .catch(ex => {
                    clear(box);
                    box.appendChild(el("p", { class: "result fail" }, sentence(ex, "check the host")));
                });
    }

    /* ---- render scheduling ---- */

    let scheduled = false;
    function render() {
        if (scheduled)
            return;
        scheduled = true;
        window.requestAnimationFrame(() => {
            scheduled = false;
            const devs = validDevices();
            renderSummary(devs);
            renderOverview(devs);
            renderPortChoice(devs);
            renderLinks();
            renderPicture(devs);
            applyControls();
            document.body.setAttribute("data-ready", connected ? "yes" : "no");
        });
    }

    for (const set of [devices, ports]) {
        set.addEventListener("added", render);
        set.addEventListener("changed", render);
        set.addEventListener("removed", render);
    }
    manager.addEventListener("changed", render);
    for (const c of [client, managerClient])
        c.addEventListener("close", (ev, options) => {
            banner("Lost the connection to the system bus: " + cockpit.message(options || {}));
        });

    /* ---- tabs ---- */

    for (const tab of document.querySelectorAll("[role=tab]")) {
        tab.addEventListener("click", () => {
            for (const t of document.querySelectorAll("[role=tab]")) {
                const on = t === tab;
                t.setAttribute("aria-selected", on ? "true" : "false");
                $(t.dataset.panel).hidden = !on;
            }
            if (tab.dataset.panel === "health")
                diagnose();
        });
    }

    /* ---- actions ---- */

    $("reconcile").addEventListener("click", () => {
        showResult("reconcile-result", "Reconciling…", "busy");
        call("Reconcile", "", [])
                .then(([changed, failed, summary]) => {
                    showResult("reconcile-result", "Reconciled: " + changed + " setting" + (changed === 1 ? "" : "s") +
                        " written, " + failed + " refused by the kernel (" + summary + ").", failed ? "fail" : "ok");
                    return diagnose();
                })
                .catch(ex => showResult("reconcile-result", sentence(ex, "reconcile"), "fail"));
    });
    $("diagnose").addEventListener("click", () => diagnose());

    $("roce-form").addEventListener("submit", ev => {
        ev.preventDefault();
        if (!$("roce-port").value) {
            showResult("roce-result", "There is no RoCE port to set.", "fail");
            return;
        }
        const [device, port] = JSON.parse($("roce-port").value);
        const mode = $("roce-mode").value;
        const tosText = $("roce-tos").value.trim();
        const tos = tosText === "" ? -1 : Number(tosText);
        // The field's min and max are the contract's range (go generate ./dbusapi).
        const tosMin = Number($("roce-tos").min), tosMax = Number($("roce-tos").max);
        if (tosText !== "" && !(Number.isInteger(tos) && tos >= tosMin && tos <= tosMax)) {
            showResult("roce-result", "TOS must be a whole number from " + tosMin + " to " + tosMax + ", or empty to keep it.", "fail");
            return;
        }
        if (!mode && tos < 0) {
            showResult("roce-result", "Choose a mode or a TOS to set.", "fail");
            return;
        }
        const persist = $("roce-persist").checked;
        const where = device + (port ? " port " + port : "");
        showResult("roce-result", "Setting " + where + "…", "busy");
        call("SetRoCE", "susib", [device, port, mode, tos, persist])
                .then(() => showResult("roce-result", "Set " + where + (persist ? "; kept after reboot." : "; until rdmad restarts."), "ok"))
                .catch(ex => showResult("roce-result", sentence(ex, "set RoCE on " + where), "fail"));
    });

    /* priorities reads "3", "3,4" or "none" into the bytes of an "ay"
     * (base64, as cockpit.js carries them), each from min to max; null
     * when it is not that. */
    function priorities(text, min, max) {
        if (text === "none")
            return [];
        const out = [];
        for (const f of text.split(",")) {
            const n = Number(f.trim());
            if (!Number.isInteger(n) || n < min || n > max || out.includes(n))
                return null;
            out.push(n);
        }
        return out.sort();
    }

    /* The [[qos]] form: its fields are made from the contract's table of
     * keys (go generate ./dbusapi), each naming its key and D-Bus type;
     * what is given goes to SetQoSSettings by those keys. rdmad checks the
     * values as it checks the files and names a bad one in its refusal. */
    $("qos-form").addEventListener("submit", ev => {
        ev.preventDefault();
        if (!$("qos-port").value) {
            showResult("qos-result", "There is no RoCE port to set.", "fail");
            return;
        }
        const [device, port] = JSON.parse($("qos-port").value);
        const settings = {};
        for (const field of $("qos-form").querySelectorAll("[data-key]")) {
            const key = field.dataset.key;
            const type = field.dataset.type;
            const text = field.value.trim();
            if (text === "")
                continue;
            if (type === "ay") {
                const min = Number(field.dataset.min);
                const max = Number(field.dataset.max);
                const p = priorities(text, min, max);
                if (p === null) {
                    showResult("qos-result", key.toUpperCase() + " priorities are " + min + " to " + max + " separated by commas, or none.", "fail");
                    return;
                }
                settings[key] = { t: type, v: cockpit.base64_encode(p) };
            } else if (type === "b") {
                settings[key] = { t: type, v: text === "on" };
            } else if (type === "s") {
                settings[key] = { t: type, v: text };
            } else {
                const n = Number(text);
                if (!Number.isInteger(n) || n < 0) {
                    showResult("qos-result", key + " must be a whole number.", "fail");
                    return;
                }
                settings[key] = { t: type, v: n };
            }
        }
        if (!Object.keys(settings).length) {
            showResult("qos-result", "Choose a setting to set.", "fail");
            return;
        }
        const persist = $("qos-persist").checked;
        const where = device + (port ? " port " + port : "");
        showResult("qos-result", "Setting " + where + "…", "busy");
        call("SetQoSSettings", "sua{sv}b", [device, port, settings, persist])
                .then(() => showResult("qos-result", "Set " + where + (persist ? "; kept after reboot." : "; until rdmad restarts."), "ok"))
                .catch(ex => showResult("qos-result", sentence(ex, "set lossless RoCE on " + where), "fail"));
    });

    $("link-form").addEventListener("submit", ev => {
        ev.preventDefault();
        const name = $("link-name").value.trim();
        const type = $("link-type").value;
        const netdev = $("link-netdev").value.trim();
        if (!name || !netdev) {
            showResult("link-result", "A link needs a name and a netdev.", "fail");
            return;
        }
        const persist = $("link-persist").checked;
        showResult("link-result", "Adding " + name + "…", "busy");
        call("AddLink", "sssb", [name, type, netdev, persist])
                .then(() => showResult("link-result", "Added " + name + " on " + netdev + (persist ? "; kept after reboot." : "; until rdmad restarts."), "ok"))
                .catch(ex => showResult("link-result", sentence(ex, "add " + name), "fail"));
    });

    $("netns-form").addEventListener("submit", ev => {
        ev.preventDefault();
        const mode = $("netns-mode").value;
        const persist = $("netns-persist").checked;
        showResult("netns-result", "Switching to " + mode + "…", "busy");
        call("SetNetnsMode", "sb", [mode, persist])
                .then(() => showResult("netns-result", "RDMA netns mode is " + mode + (persist ? "; kept after reboot." : "; until rdmad restarts."), "ok"))
                .catch(ex => showResult("netns-result", sentence(ex, "switch the netns mode"),
                    ex && ex.name === "org.rdmad1.Error.NextBoot" ? "warn" : "fail"));
    });

    /* ---- start ---- */

    applyAccess();
    Promise.all([manager.wait(), devices.wait(), ports.wait()])
            .then(() => {
                connected = true;
                render();
            })
            .catch(ex => {
                connected = true;
                console.warn("rdmad: waiting for the objects failed", ex, JSON.stringify(ex));
                banner(sentence(ex, "reach rdmad"));
                render();
            });
}());
