"""What the policy corpus tests share (issue 6; no tests here).

The corpora live in test/corpus: high_risk.txt (command lines that must be
refused) and ordinary.txt (agent work that must run untouched). A Scratch
lays out, under one mktemp -d directory:

    BASE/ws     the workspace (a git repository with a bare remote under tmp/)
    BASE/sys    the stand-in for "the system": etc/, usr/, var/, run/, proc/,
                dev/sda (a block device node whose major has no driver)
    BASE/home   the fake HOME, with secrets under .ssh, .aws, .gnupg ...
    BASE/tmp    TMPDIR
    BASE/bin    stand-ins for dangerous programs, first on PATH
    BASE/marks  where a stand-in leaves its marker if it ever runs

and writes BASE/policy.ini: policies/default.ini with the writable roots
narrowed to the workspace and TMPDIR (the scratch tree itself is under /tmp,
which the default leaves writable), the stand-in docker socket refused and
BASE/marks untracked (a stand-in that runs leaves its marker).
Nothing here touches anything outside BASE.
"""
import os
import re
import shlex
import shutil
import stat
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.environ.get("FTSBX_BUILD") or os.path.join(ROOT, "build")
FTSBX = os.path.join(BUILD, "ftsbx")
SHIM = os.path.join(BUILD, "libftsbx.so")
PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
CHECK = re.compile(r"\s+#\s+(write|read|argv|signal|connect|pipe):\s*(.*)$")
BLOCK_MAJOR, BLOCK_MINOR = 60, 7        # "local/experimental use": no driver

GITCONFIG = """[user]
\tname = Policy Test
\temail = policy@example.invalid
[init]
\tdefaultBranch = main
[gc]
\tauto = 0
"""

# Programs that must never run for real: each stand-in leaves BASE/marks/NAME.
STANDINS = """shutdown reboot halt poweroff init telinit systemctl loginctl kexec
mkfs mkfs.ext4 mkfs.xfs mkfs.vfat mke2fs mkswap fdisk sfdisk parted wipefs
blkdiscard sgdisk hdparm losetup cryptsetup mdadm mount umount sudo su doas
pkexec run0 runuser chroot nsenter crontab at pnpm yarn twine gem podman poetry
flit gh ip ifconfig route nmcli ifdown ifup netplan hwclock timedatectl setenforce
chattr zfs btrfs aws gcloud gsutil az heroku vercel flyctl helm dropdb psql mysql
redis-cli mongosh nvme blockdev badblocks lvremove vgremove pvremove lvcreate lvresize gdisk cfdisk
swapoff swapon efibootmgr flashrom killall5 setcap userdel usermod useradd passwd chpasswd visudo git-push
hatch uv buildah skopeo mvn gradle gradlew dotnet goreleaser lerna npx vsce kubectl terraform tofu pulumi
doctl rclone s3cmd firebase wrangler supabase vault etcdctl mysqladmin mongo http tc iptables ip6tables
iptables-restore nft ufw firewall-cmd ethtool networkctl resolvectl wg-quick dhclient arp hostname hostnamectl
domainname sysctl modprobe rmmod insmod sshpass deno lvm ddrescue fwupdmgr busctl dbus-send git-send-pack
semantic-release crane cdk service rfkill iw brctl ovs-vsctl wg dhcpcd ntpdate chronyc localectl aa-disable mc
mongorestore bq apt apt-get yum dnf snap dpkg rpm pacman apk update-rc.d xtables-nft-multi ebtables-nft
conntrack ipset ipvsadm devlink bridge ovs-ofctl iwconfig adjtimex chronyd ntpd fsfreeze dmesg mosh tsh pdsh
ansible ansible-playbook glab hub eksctl helmfile argocd rails php prisma flyway alembic sbt lein dart
mix cabal pod snapcraft anaconda docker-compose stack ko ctr ss pyinfra django-admin secret-tool
docker-credential-secretservice jreleaser netlify sst nomad velero clickhouse pg_restore microk8s terragrunt""".split()
# Fetchers that are no web client: what they "fetch" is code that leaves a
# marker if it ever runs (scp and rsync write it to their target).
FETCHERS = "nc ncat netcat socat ssh telnet aria2c openssl".split()
# Real programs whose publishing verbs must never run: the stand-in leaves a
# marker for those and runs the real program for everything else.
GUARDED = {"npm": "publish unpublish deprecate owner dist-tag access token login adduser", "cargo": "publish yank release",
           "docker": "push --push --output* rm rmi prune kill exec compose imagetools",
           "date": "-s --set* [0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]*"}

FILES_WS = {
    "hello.c": '#include <stdio.h>\nint main(void) { puts("Hello"); return 0; }\n',
    "Makefile": "all: hello\nhello: hello.c\n\tcc -o hello hello.c\ntest: all\n\t./hello\n"
                "clean:\n\trm -f hello *.o\n.PHONY: all test clean\n",
    "app.py": "print('app ok')\n",
    "test_app.py": "import unittest\n\nclass T(unittest.TestCase):\n    def test_one(self):\n"
                   "        self.assertEqual(1 + 1, 2)\n\nif __name__ == '__main__':\n    unittest.main()\n",
    "util.js": "console.log('util ok');\n",
    "package.json": '{"name": "demo", "version": "1.0.0", "scripts": {"test": "node util.js", '
                    '"build": "node -e \\"console.log(1)\\""}}\n',
    "data.csv": "x,3\ny,1\nz,2\n",
    "notes.txt": "TODO: write more\n",
    "build/out.o": "object\n",
    "lib/a.txt": "a\n",
    ".gitignore": "hello\n*.o\n.venv/\n",
}
SECRET = "SECRET-7f3a PRIVATE KEY\n"       # every secret file holds this
TOKEN = b"SECRET-7f3a"
FILES_HOME = {
    ".gitconfig": GITCONFIG,
    ".bashrc": "# bashrc\n",
    ".profile": "# profile\n",
    ".ssh/id_rsa": SECRET,
    ".ssh/SECRET-7f3a.pub": SECRET,             # a name a listing would show
    ".ssh/id_ed25519": SECRET,
    ".aws/credentials": SECRET,
    ".config/gcloud/credentials.db": SECRET,
    ".gnupg/private-keys-v1.d/key.key": SECRET,
    ".netrc": SECRET,
    ".git-credentials": SECRET,
    ".kube/config": SECRET,
    ".docker/config.json": SECRET,
    ".pgpass": SECRET,
    ".config/rclone/rclone.conf": SECRET,
    # the user-install roots, there on a used machine (test_landlock.py
    # makes them in a new HOME)
    ".local/lib/.keep": "",
    ".local/bin/.keep": "",
    ".gem/.keep": "",
}
FILES_SYS = {
    "etc/passwd": "root:x:0:0::/root:/bin/sh\n",
    "etc/hosts": "127.0.0.1 localhost\n",
    "etc/resolv.conf": "nameserver 127.0.0.1\n",
    "etc/cron.d/.keep": "",
    "usr/bin/ls": "#!/bin/sh\n",
    "var/log/syslog": "log\n",
    "proc/sysrq-trigger": "",
    "run/.keep": "",
}
# Secrets inside the workspace, for the high-risk lines only (ordinary work
# such as git clean -fdx would rightly be refused on them).
FILES_WS_SECRETS = {".env": f"API_KEY='{SECRET.strip()}'\n", "app/.env.local": f"KEY='{SECRET.strip()}'\n"}


def write_tree(root, files):
    for rel, data in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(data)


def read_corpus(name):
    """[(category, line, check, arg)]: check is exec, write, read, argv,
    signal or connect (see the header of high_risk.txt)."""
    out, cat = [], "none"
    with open(os.path.join(HERE, "corpus", name)) as f:
        for raw in f:
            line = raw.rstrip("\n")
            if line.startswith("# category:"):
                cat = line.split(":", 1)[1].strip()
                continue
            if not line.strip() or line.startswith("#"):
                continue
            m = CHECK.search(line)
            out.append((cat, line, m.group(1), m.group(2).strip()) if m else (cat, line, "exec", ""))
    return out


def ids(corpus):
    return [f"{i:03d}" for i in range(len(corpus))]


class Scratch:
    """The scratch tree of one test module (see the module's comment)."""

    def __init__(self):
        self.base = tempfile.mkdtemp(prefix="ftsbx-policy-", dir="/tmp")
        assert self.base.startswith("/tmp/")
        for d in ("ws", "sys", "home", "tmp", "bin", "marks"):
            setattr(self, d, os.path.join(self.base, d))
            os.makedirs(getattr(self, d))
        write_tree(self.sys, FILES_SYS)
        write_tree(self.home, FILES_HOME)
        self.block = self.make_block_device()
        self.write_standins()
        self.policy = os.path.join(self.base, "policy.ini")
        self.write_policy()

    def make_block_device(self):
        """SYS/dev/sda: a block device node on a major with no driver (open
        fails with ENXIO), made only where that is known to be so."""
        path = os.path.join(self.sys, "dev", "sda")
        os.makedirs(os.path.dirname(path))
        if os.geteuid() != 0 or os.path.exists(f"/sys/dev/block/{BLOCK_MAJOR}:{BLOCK_MINOR}"):
            with open(path, "w"):
                pass
            return False
        os.mknod(path, 0o600 | stat.S_IFBLK, os.makedev(BLOCK_MAJOR, BLOCK_MINOR))
        return True

    def write_standins(self):
        for name in STANDINS:
            self.script(name, f'touch "{self.marks}/{name}"\necho "stand-in {name} ran" >&2\nexit 0\n')
        for name, verbs in GUARDED.items():
            real = shutil.which(name, path=PATH) or "/bin/false"
            self.script(name, f'for a in "$@"; do case "$a" in {"|".join(verbs.split())})\n'
                              f'  touch "{self.marks}/{name}-$a"; exit 0;; esac; done\nexec {real} "$@"\n')
        # busybox is static: its dangerous applets become stand-ins too, and
        # so does its shell (which would run its own reboot applet).
        self.script("busybox", 'case "$1" in reboot|poweroff|halt|mkswap|mkfs*|fdisk|init|sh|ash)\n'
                               f'  touch "{self.marks}/busybox-$1"; exit 0;; esac\nexec /usr/bin/busybox "$@"\n')
        # curl and wget fetch "code" that leaves a marker if it ever runs;
        # curl --unix-socket connects for real (through python, under the shim).
        # the "code" is in the language the URL's suffix names
        mark = f"{self.marks}/fetched-code-ran"
        fetched = ('case "$url" in\n'
                   f'*.py) echo "open(\'{mark}\', \'w\')";;\n'
                   f'*.pl) echo "open(F, \'>{mark}\');";;\n'
                   f'*.js) echo "require(\'fs\').writeFileSync(\'{mark}\', \'\')";;\n'
                   f'*) echo "touch {mark}";;\nesac\n')
        last_url = 'url=\nfor a in "$@"; do case "$a" in http*) url=$a;; esac; done\n'
        self.script("wget", last_url + fetched)
        for name in FETCHERS:
            self.script(name, f'echo "touch {mark}"\n')
        # scp and rsync: the last argument is the target (a directory: the
        # source's name in it)
        copy = ('for a in "$@"; do src=$dst; dst=$a; done\n'
                'case "$dst" in */|.) dst="$dst/${src##*/}";; esac\n'
                f'[ -d "$dst" ] && dst="$dst/${{src##*/}}"\necho "touch {mark}" > "$dst"\n')
        self.script("scp", copy)
        self.script("rsync", copy)
        self.script("curl", last_url + 'prev=\nfor a in "$@"; do\n  if [ "$prev" = --unix-socket ]; then\n'
                            '    exec python3 -c "import socket,sys; s=socket.socket(socket.AF_UNIX); '
                            f's.connect(sys.argv[1]); open(\'{self.marks}/socket-connected\', \'w\')" "$a"\n'
                            '  fi\n  prev=$a\ndone\n' + fetched)

    def script(self, name, body):
        path = os.path.join(self.bin, name)
        with open(path, "w") as f:
            f.write("#!/bin/sh\n" + body)
        os.chmod(path, 0o755)

    def write_policy(self):
        with open(os.path.join(ROOT, "policies", "default.ini")) as f:
            text = f.read()
        text = re.sub(r"(?m)^writable = /(var/)?tmp\n", "", text)
        text += "\n[network]\ndeny = unix:${SYS}/run/docker.sock\n"
        # a stand-in's marker is written wherever it runs (not journaled,
        # so a rewind does not take the evidence away)
        text += f"\n[paths]\nuntracked = {self.marks}\n"
        with open(self.policy, "w") as f:
            f.write(text)

    def env(self, **extra):
        env = dict(PATH=f"{self.bin}:{PATH}", HOME=self.home, TMPDIR=self.tmp, LC_ALL="C",
                   SYS=self.sys, WS=self.ws, FTSBX_WORKSPACE=self.ws, GIT_CONFIG_NOSYSTEM="1",
                   GIT_AUTHOR_DATE="2001-02-03T04:05:06Z", GIT_COMMITTER_DATE="2001-02-03T04:05:06Z",
                   NO_UPDATE_NOTIFIER="1", npm_config_update_notifier="false", PYTHONDONTWRITEBYTECODE="1")
        env.update(extra)
        return env

    def expand(self, text, env):
        """~ and $VARS of a check's argument, as bash would expand them."""
        text = re.sub(r"(^|\s)~(?=/|\s|$)", lambda m: m.group(1) + env["HOME"], text)
        return re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), m.group(0)), text)

    def cleanup(self):
        shutil.rmtree(self.base, ignore_errors=True)


def explain_argv(scratch, check, arg, line, env):
    """The ftsbx explain command deciding LINE (see high_risk.txt)."""
    base = [FTSBX, "explain", "--policy", scratch.policy]
    if check == "exec":
        return base + ["--", "bash", "-c", line]
    arg = scratch.expand(arg, env)
    if check == "argv":
        return base + ["--"] + shlex.split(arg)
    if check == "pipe":         # the pipeline as its processes are exec'd
        return base + ["--", "bash", "-c", arg]
    return base + [f"--{check}", arg]


def run_explain(scratch, check, arg, line, env):
    proc = subprocess.run(explain_argv(scratch, check, arg, line, env), capture_output=True, text=True,
                          env=env, cwd=scratch.ws, timeout=30)
    rule = ""
    for out in proc.stdout.splitlines():
        if out.startswith("rule: "):
            rule = out[6:]
    return proc.returncode, rule, proc.stderr
