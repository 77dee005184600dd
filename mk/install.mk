# Installation layout. `make install DESTDIR=/some/root PREFIX=/usr` stages a
# complete rdmad into a root tree (the e2e VM image is built this way).
# Build a static binary for foreign roots with `make install CGO_ENABLED=0`.

SYSCONFDIR     ?= /etc
SBINDIR        ?= $(PREFIX)/sbin
BINDIR         ?= $(PREFIX)/bin
UNITDIR        ?= $(PREFIX)/lib/systemd/system
UDEVRULESDIR   ?= $(PREFIX)/lib/udev/rules.d
SYSUSERSDIR    ?= $(PREFIX)/lib/sysusers.d
TMPFILESDIR    ?= $(PREFIX)/lib/tmpfiles.d
DBUSPOLICYDIR  ?= $(PREFIX)/share/dbus-1/system.d
DBUSSERVICEDIR ?= $(PREFIX)/share/dbus-1/system-services
POLKITDIR      ?= $(PREFIX)/share/polkit-1/actions
# Optional polkit rules: shipped, active only once linked into /etc/polkit-1/rules.d.
POLKITRULESDIR ?= $(PREFIX)/share/rdmad/polkit
BASHCOMPDIR    ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR     ?= $(PREFIX)/share/zsh/vendor-completions
FISHCOMPDIR    ?= $(PREFIX)/share/fish/vendor_completions.d
MANDIR         ?= $(PREFIX)/share/man
COCKPITDIR     ?= $(PREFIX)/share/cockpit/rdmad
# Prometheus alert and recording rules and the Grafana dashboard, for the
# Prometheus server to load (docs/metrics.md).
PROMETHEUSDIR  ?= $(PREFIX)/share/rdmad/prometheus
LIBEXECDIR     ?= $(PREFIX)/libexec/rdmad
DATADIR        ?= $(PREFIX)/share/rdmad
DOCDIR         ?= $(PREFIX)/share/doc/rdmad

INSTALL        ?= install

PROMETHEUS_FILES := contrib/prometheus/rdmad-alerts.rules.yml contrib/prometheus/rdmad-fleet.rules.yml \
	contrib/prometheus/rdmad-fleet.dashboard.json

# Files other areas ship; each is installed only once it exists in the tree,
# so install works while they are still being written.
OPTIONAL_DATA := \
	units/org.rdmad1.conf:$(DBUSPOLICYDIR)/org.rdmad1.conf \
	units/org.rdmad1.policy:$(POLKITDIR)/org.rdmad1.policy \
	units/50-rdmad-persist-as-runtime.rules:$(POLKITRULESDIR)/50-rdmad-persist-as-runtime.rules \
	contrib/completion/rdmactl.bash:$(BASHCOMPDIR)/rdmactl \
	contrib/completion/_rdmactl:$(ZSHCOMPDIR)/_rdmactl \
	contrib/completion/rdmactl.fish:$(FISHCOMPDIR)/rdmactl.fish

# Units name the binary by absolute path; rewrite it when PREFIX is not /usr.
fix_sbin = sed -e 's|/usr/sbin/rdmad|$(SBINDIR)/rdmad|g'

.PHONY: install

install: build
	$(INSTALL) -D -m 0755 $(BIN)/rdmad   $(DESTDIR)$(SBINDIR)/rdmad
	$(INSTALL) -D -m 0755 $(BIN)/rdmactl $(DESTDIR)$(BINDIR)/rdmactl
	$(INSTALL) -d -m 0755 $(DESTDIR)$(UNITDIR)
	$(fix_sbin) units/rdmad.service >$(DESTDIR)$(UNITDIR)/rdmad.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/rdmad.service
	$(INSTALL) -D -m 0644 units/90-rdmad.rules    $(DESTDIR)$(UDEVRULESDIR)/90-rdmad.rules
	$(INSTALL) -D -m 0644 units/rdmad.sysusers    $(DESTDIR)$(SYSUSERSDIR)/rdmad.conf
	$(INSTALL) -D -m 0644 units/rdmad.tmpfiles    $(DESTDIR)$(TMPFILESDIR)/rdmad.conf
	@set -e; for pair in $(OPTIONAL_DATA); do \
		src=$${pair%%:*}; dst=$(DESTDIR)$${pair#*:}; \
		if [ -f "$$src" ]; then echo "$(INSTALL) -D -m 0644 $$src $$dst"; $(INSTALL) -D -m 0644 "$$src" "$$dst"; \
		else echo "install: $$src not in the tree yet, skipped"; fi; \
	done
	@set -e; if [ -f units/org.rdmad1.service ]; then \
		$(INSTALL) -d -m 0755 $(DESTDIR)$(DBUSSERVICEDIR); \
		$(fix_sbin) units/org.rdmad1.service >$(DESTDIR)$(DBUSSERVICEDIR)/org.rdmad1.service; \
		chmod 0644 $(DESTDIR)$(DBUSSERVICEDIR)/org.rdmad1.service; \
		echo "installed $(DESTDIR)$(DBUSSERVICEDIR)/org.rdmad1.service"; \
	else echo "install: units/org.rdmad1.service not in the tree yet, skipped"; fi
	@set -e; for page in docs/*.5 docs/*.8; do \
		[ -f "$$page" ] || continue; sect=$${page##*.}; \
		$(INSTALL) -D -m 0644 "$$page" "$(DESTDIR)$(MANDIR)/man$$sect/$${page##*/}"; \
		echo "installed $(DESTDIR)$(MANDIR)/man$$sect/$${page##*/}"; \
	done
	$(INSTALL) -d -m 0755 $(DESTDIR)$(PROMETHEUSDIR)
	$(INSTALL) -m 0644 $(PROMETHEUS_FILES) $(DESTDIR)$(PROMETHEUSDIR)/
	# The health checks a batch system runs (docs/fleet.md): Slurm's
	# HealthCheckProgram with its settings' example, NHC's check; and the
	# fleet guide beside them.
	$(INSTALL) -D -m 0755 contrib/slurm/rdmad-healthcheck $(DESTDIR)$(LIBEXECDIR)/rdmad-healthcheck
	$(INSTALL) -D -m 0644 contrib/slurm/slurm-healthcheck.conf $(DESTDIR)$(DATADIR)/slurm/slurm-healthcheck.conf
	$(INSTALL) -D -m 0644 contrib/nhc/rdmad.nhc $(DESTDIR)$(DATADIR)/nhc/rdmad.nhc
	$(INSTALL) -D -m 0644 docs/fleet.md $(DESTDIR)$(DOCDIR)/fleet.md
	$(INSTALL) -d -m 0755 $(DESTDIR)$(COCKPITDIR)
	$(INSTALL) -m 0644 $(COCKPIT_FILES) $(DESTDIR)$(COCKPITDIR)/
	$(INSTALL) -d -m 0755 $(DESTDIR)$(SYSCONFDIR)/rdma/rdmad.d
	@set -e; if [ ! -f etc/rdma/rdmad.toml ]; then \
		echo "install: etc/rdma/rdmad.toml not in the tree yet, skipped"; \
	elif [ -z "$(DESTDIR)" ] && [ -e $(SYSCONFDIR)/rdma/rdmad.toml ]; then \
		echo "install: keeping existing $(SYSCONFDIR)/rdma/rdmad.toml"; \
	else \
		$(INSTALL) -D -m 0644 etc/rdma/rdmad.toml $(DESTDIR)$(SYSCONFDIR)/rdma/rdmad.toml; \
		echo "installed $(DESTDIR)$(SYSCONFDIR)/rdma/rdmad.toml"; \
	fi
