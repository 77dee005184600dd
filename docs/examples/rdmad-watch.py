#!/usr/bin/python3
"""rdmad-watch: list the RDMA devices and ports rdmad publishes, then follow
their changes, the way a NetworkManager-style tool talks to rdmad.

It uses only the public D-Bus API (docs/dbus-api.md) through GLib's GDBus
(PyGObject; Debian: python3-gi): the standard ObjectManager call
GetManagedObjects for the initial state, then the standard signals
PropertiesChanged (a port's RoCE mode or TOS, a device's state...),
InterfacesAdded and InterfacesRemoved (devices coming and going).

    rdmad-watch.py                 # system bus, runs until Ctrl-C
    rdmad-watch.py --once          # list and exit
    rdmad-watch.py --address unix:path=/run/some/bus.sock

Output: one line per object or event, e.g.
    rdmad 1.2.3 last_result=ok config_error=none
    device mlx5_0 driver=mlx5_core pci=0000:3b:00.0 ports=1
    port mlx5_0/1 state=ACTIVE link_layer=Ethernet roce_mode=RoCE v2 roce_tos=106
    changed mlx5_0/1 org.rdmad1.Port RoCETOS=42
    added device rxe1 ...
    removed /org/rdmad1/devices/rxe1 rxe1 org.rdmad1.Device
"""

import argparse
import signal
import sys

import gi

gi.require_version("Gio", "2.0")
gi.require_version("GLib", "2.0")
from gi.repository import Gio, GLib  # noqa: E402

BUS_NAME = "org.rdmad1"
ROOT_PATH = "/org/rdmad1"
DEVICE = "org.rdmad1.Device"
PORT = "org.rdmad1.Port"
MANAGER = "org.rdmad1.Manager"
OBJECT_MANAGER = "org.freedesktop.DBus.ObjectManager"
PROPERTIES = "org.freedesktop.DBus.Properties"


def say(*words):
    print(*words, flush=True)


def describe(path, interfaces):
    """One line for an object of GetManagedObjects / InterfacesAdded."""
    if DEVICE in interfaces:
        d = interfaces[DEVICE]
        return "device %s driver=%s pci=%s ports=%d%s" % (
            d.get("Name", "?"), d.get("Driver", ""), d.get("PCIAddress", ""),
            len(d.get("Ports", [])), " error=" + d["Error"] if d.get("Error") else "")
    if PORT in interfaces:
        p = interfaces[PORT]
        return "port %s/%d state=%s link_layer=%s roce_mode=%s roce_tos=%d%s" % (
            p.get("Device", "?"), p.get("Number", 0), p.get("State", ""), p.get("LinkLayer", ""),
            p.get("RoCEMode", ""), p.get("RoCETOS", -1), " error=" + p["Error"] if p.get("Error") else "")
    if MANAGER in interfaces:
        m = interfaces[MANAGER]
        return "rdmad %s last_result=%s config_error=%s" % (
            m.get("Version", "?"), m.get("LastResult", ""), m.get("ConfigError", "") or "none")
    return "object %s %s" % (path, " ".join(sorted(interfaces)))


class Watcher:
    def __init__(self, conn):
        self.conn = conn
        self.names = {ROOT_PATH: "manager"}  # object path -> "dev", "dev/port", for readable events

    def remember(self, path, interfaces):
        if DEVICE in interfaces:
            self.names[path] = interfaces[DEVICE].get("Name", path)
        elif PORT in interfaces:
            p = interfaces[PORT]
            self.names[path] = "%s/%d" % (p.get("Device", "?"), p.get("Number", 0))

    def subscribe(self):
        # Subscribe before reading the state, so nothing that changes in
        # between is missed. The sender is matched by the bus daemon.
        self.conn.signal_subscribe(BUS_NAME, PROPERTIES, "PropertiesChanged", None, None,
                                   Gio.DBusSignalFlags.NONE, self.on_properties_changed)
        self.conn.signal_subscribe(BUS_NAME, OBJECT_MANAGER, "InterfacesAdded", ROOT_PATH, None,
                                   Gio.DBusSignalFlags.NONE, self.on_interfaces_added)
        self.conn.signal_subscribe(BUS_NAME, OBJECT_MANAGER, "InterfacesRemoved", ROOT_PATH, None,
                                   Gio.DBusSignalFlags.NONE, self.on_interfaces_removed)

    def list_objects(self):
        # The manager's own properties (the root object is not one of the
        # objects it manages), then every device and port.
        reply = self.conn.call_sync(BUS_NAME, ROOT_PATH, PROPERTIES, "GetAll", GLib.Variant("(s)", (MANAGER,)),
                                    GLib.VariantType.new("(a{sv})"), Gio.DBusCallFlags.NONE, 10000, None)
        say(describe(ROOT_PATH, {MANAGER: reply.unpack()[0]}))
        reply = self.conn.call_sync(BUS_NAME, ROOT_PATH, OBJECT_MANAGER, "GetManagedObjects", None,
                                    GLib.VariantType.new("(a{oa{sa{sv}}})"), Gio.DBusCallFlags.NONE,
                                    10000, None)
        objects = reply.unpack()[0]  # {path: {interface: {property: value}}}
        for path in sorted(objects):  # each device followed by its ports
            self.remember(path, objects[path])
            say(describe(path, objects[path]))
        return len(objects)

    def on_properties_changed(self, conn, sender, path, iface, signal_name, params):
        interface, changed, invalidated = params.unpack()
        words = ["%s=%s" % (k, changed[k]) for k in sorted(changed)]
        words += ["%s=<invalidated>" % k for k in invalidated]
        say("changed", self.names.get(path, path), interface, " ".join(words))

    def on_interfaces_added(self, conn, sender, path, iface, signal_name, params):
        obj, interfaces = params.unpack()
        self.remember(obj, interfaces)
        say("added", describe(obj, interfaces))

    def on_interfaces_removed(self, conn, sender, path, iface, signal_name, params):
        obj, interfaces = params.unpack()
        say("removed", obj, self.names.pop(obj, ""), " ".join(interfaces))


def connect(address):
    if not address:
        return Gio.bus_get_sync(Gio.BusType.SYSTEM, None)
    flags = (Gio.DBusConnectionFlags.AUTHENTICATION_CLIENT
             | Gio.DBusConnectionFlags.MESSAGE_BUS_CONNECTION)
    return Gio.DBusConnection.new_for_address_sync(address, flags, None, None)


def main():
    ap = argparse.ArgumentParser(description="List rdmad's RDMA devices and follow their changes.")
    ap.add_argument("--address", help="D-Bus address (default: the system bus)")
    ap.add_argument("--once", action="store_true", help="list and exit")
    args = ap.parse_args()
    try:
        conn = connect(args.address)
        watcher = Watcher(conn)
        if not args.once:
            watcher.subscribe()
        watcher.list_objects()
    except GLib.Error as err:
        print("rdmad-watch: %s" % err.message, file=sys.stderr)
        return 1
    if args.once:
        return 0
    say("watching")
    loop = GLib.MainLoop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, signum, loop.quit)
    loop.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
