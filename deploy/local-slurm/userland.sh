#!/bin/bash
# userland.sh - a Slurm of another version than the host's, from Debian's packages, that the
# local cluster scripts (and resurrect) run beside the host's own Slurm.
#
# Usage: userland.sh [--cache-dir DIR] [--no-install] VERSION
#   VERSION      24.11 (Debian 13 "trixie") or 26.05 (Debian unstable "sid")
#   --cache-dir  where userlands are kept between runs   [$LOCAL_SLURM_CACHE_DIR or /var/cache/resurrect]
#   --no-install never call apt-get (mmdebstrap must be installed) nor build a missing userland
# Prints the userland's directory DIR (last stdout line). DIR holds:
#   root/     the Debian userland (mmdebstrap --variant=apt: slurmctld slurmd munge
#             slurm-client slurmrestd python3), built once, then reused
#   bin/      the client commands (squeue, sinfo, scontrol, sbatch, ...) of that version
#   sbin/     slurmctld, slurmd (a script: libexec/slurmd told to use sbin/slurmstepd),
#             slurmstepd, slurmrestd of that version
#   VERSION   what `slurmctld -V` prints
# The programs are copies of root's whose ELF interpreter and library path point into root
# (patchelf): they run on the host's filesystem without a chroot, so job scripts, the jobcomp
# script, trigger programs and the project's virtual environment are the host's, no
# LD_LIBRARY_PATH reaches a job, and each process has its program's name (pidfile checks).
# Plugins come from root's plugin dir (slurm.conf PluginDir, written by start.sh).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

CACHE_DIR=${LOCAL_SLURM_CACHE_DIR:-/var/cache/resurrect}
NO_INSTALL=${LOCAL_SLURM_NO_INSTALL:-0}
while [ $# -gt 0 ]; do
  case $1 in
    --cache-dir) CACHE_DIR=$2; shift 2 ;;
    --no-install) NO_INSTALL=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    -*) ls_die "unknown option: $1" ;;
    *) break ;;
  esac
done
[ $# -eq 1 ] || ls_die "usage: userland.sh [--cache-dir DIR] [--no-install] VERSION"
VERSION=$1
case $VERSION in
  24.11) SUITE=trixie ;;
  26.05) SUITE=sid ;;
  *) ls_die "no Debian userland for Slurm $VERSION (24.11 or 26.05; 22.05 is the host's)" ;;
esac
[[ $CACHE_DIR = /* && $CACHE_DIR =~ ^[A-Za-z0-9/._-]+$ ]] || ls_die "--cache-dir must be a plain absolute path"
DIR=$CACHE_DIR/slurm-$VERSION
ROOTFS=$DIR/root
LOADER=/lib64/ld-linux-x86-64.so.2
MULTIARCH=usr/lib/x86_64-linux-gnu
CLIENTS=(squeue sinfo scontrol sbatch scancel srun salloc sacct sprio sstat strigger sdiag sshare)

mkdir -p "$CACHE_DIR"
chmod 0755 "$CACHE_DIR"
exec 9>"$CACHE_DIR/.slurm-$VERSION.lock"
flock 9  # one build at a time; others wait and reuse it

# ---------------------------------------------------------------- root (built once)
if [ ! -x "$ROOTFS/usr/sbin/slurmctld" ]; then
  [ "$NO_INSTALL" = 1 ] && ls_die "no Slurm $VERSION userland in $DIR (and --no-install)"
  if ! command -v mmdebstrap >/dev/null; then
    ls_log "apt-get install mmdebstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends mmdebstrap \
      >/tmp/local-slurm-apt.log 2>&1 || ls_die "apt-get install mmdebstrap failed, see /tmp/local-slurm-apt.log"
  fi
  ls_log "building the Slurm $VERSION userland (Debian $SUITE) in $ROOTFS"
  rm -rf "$ROOTFS.new"
  mkdir -p "$DIR"
  # unstable's Release files carry a short Valid-Until; a mirror snapshot may be past it
  mmdebstrap --quiet --variant=apt --aptopt='Acquire::Check-Valid-Until "false"' \
    --include=slurmctld,slurmd,munge,slurm-client,slurmrestd,slurm-wlm-jwt-plugin,python3 \
    "$SUITE" "$ROOTFS.new" >"$DIR/build.log" 2>&1 \
    || ls_die "mmdebstrap $SUITE failed, see $DIR/build.log"
  rm -rf "$ROOTFS" "$DIR/VERSION"
  mv "$ROOTFS.new" "$ROOTFS"
  ls_log "userland built"
fi
chmod 0755 "$DIR" "$ROOTFS"

# ---------------------------------------------------------------- auth/jwt (slurmrestd's tokens)
# Userlands built before slurm-wlm-jwt-plugin was in the list above get it added, at the
# version of the Slurm already there (apt refuses a mismatch rather than mixing releases).
if [ ! -e "$ROOTFS/$MULTIARCH/slurm-wlm/auth_jwt.so" ]; then
  [ "$NO_INSTALL" = 1 ] && ls_die "no auth/jwt plugin in $ROOTFS (and --no-install)"
  ls_log "adding slurm-wlm-jwt-plugin to the Slurm $VERSION userland"
  have=$(chroot "$ROOTFS" dpkg-query -W -f='${Version}' slurmctld)
  cp /etc/resolv.conf "$ROOTFS/etc/resolv.conf"
  { chroot "$ROOTFS" apt-get -o Acquire::Check-Valid-Until=false update -q \
      && chroot "$ROOTFS" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends "slurm-wlm-jwt-plugin=$have"; } >>"$DIR/build.log" 2>&1 \
    || ls_die "cannot add slurm-wlm-jwt-plugin $have, see $DIR/build.log"
fi

# ---------------------------------------------------------------- programs (made once)
if [ -s "$DIR/VERSION" ] && [ -x "$DIR/sbin/slurmd" ]; then echo "$DIR"; exit 0; fi
if ! command -v patchelf >/dev/null; then
  [ "$NO_INSTALL" = 1 ] && ls_die "patchelf is missing (and --no-install)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends patchelf \
    >/tmp/local-slurm-apt.log 2>&1 || ls_die "apt-get install patchelf failed, see /tmp/local-slurm-apt.log"
fi
LIBPATH=$ROOTFS/$MULTIARCH/slurm-wlm:$ROOTFS/$MULTIARCH:$ROOTFS/usr/lib
mkdir -p "$DIR/libexec" "$DIR/bin" "$DIR/sbin"
chmod 0755 "$DIR/libexec" "$DIR/bin" "$DIR/sbin"
# program OUT NAME PATH : OUT/NAME is a copy of root's PATH that loads root's loader and
# libraries (ELF interpreter and DT_RPATH, which also covers the plugins it dlopens). A copy,
# not a wrapper: slurmctld re-executes /proc/self/exe to start slurmscriptd.
program() {
  local out=$1 name=$2 target
  # Debian's daemons are links through /etc/alternatives: resolve them inside root
  target=$ROOTFS$(chroot "$ROOTFS" readlink -f "$3")
  cp "$target" "$out/.$name.tmp"
  patchelf --set-interpreter "$ROOTFS$LOADER" --force-rpath --set-rpath "$LIBPATH" "$out/.$name.tmp"
  chmod 0755 "$out/.$name.tmp"
  mv "$out/.$name.tmp" "$out/$name"
}
for c in "${CLIENTS[@]}"; do
  if [ -x "$ROOTFS/usr/bin/$c" ]; then program "$DIR/bin" "$c" "/usr/bin/$c"; fi
done
program "$DIR/sbin" slurmctld /usr/sbin/slurmctld
program "$DIR/sbin" slurmstepd /usr/sbin/slurmstepd
if [ -x "$ROOTFS/usr/sbin/slurmrestd" ]; then program "$DIR/sbin" slurmrestd /usr/sbin/slurmrestd; fi
# slurmd starts the slurmstepd it was built with (/usr/sbin, the host's) unless told (-d)
program "$DIR/libexec" slurmd /usr/sbin/slurmd
cat >"$DIR/sbin/.slurmd.tmp" <<SLURMD_EOF
#!/bin/sh
# slurmd of Slurm $VERSION with its own slurmstepd (generated by deploy/local-slurm/userland.sh)
exec $DIR/libexec/slurmd -d $DIR/sbin/slurmstepd "\$@"
SLURMD_EOF
chmod 0755 "$DIR/sbin/.slurmd.tmp"
mv "$DIR/sbin/.slurmd.tmp" "$DIR/sbin/slurmd"
built=$("$DIR/sbin/slurmctld" -V | awk '{print $2}')
case $built in
  "$VERSION".*) ;;
  *) ls_die "$ROOTFS holds Slurm $built, not $VERSION" ;;
esac
echo "$built" >"$DIR/VERSION"
echo "$DIR"
