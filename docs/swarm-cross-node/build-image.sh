#!/usr/bin/env bash
# crossnode-bench:local — host binaries (redis, sockperf, iperf3, ping…) + their libs, docker import.
set -euo pipefail
image=crossnode-bench:local
tmp=$(mktemp -d /tmp/crossnode-image.XXXXXX); trap 'rm -rf "$tmp"' EXIT
r=$tmp/rootfs; mkdir -p "$r"/usr/{bin,sbin,lib,lib64}
for d in bin sbin lib lib64; do if [[ -L /$d ]]; then ln -s usr/$d "$r/$d"; else mkdir -p "$r/$d"; fi; done
copy_in() { local dest=$r$1; [[ -e $dest ]] && return 0; mkdir -p "${dest%/*}"; cp -L --preserve=mode "$1" "$dest"; }
paths=(/bin/sh)
for n in sleep cat ip ping iperf3 ss grep ls env timeout true redis-server redis-benchmark redis-cli sockperf taskset; do paths+=("$(type -P $n)"); done
for b in "${paths[@]}"; do
  copy_in "$b"
  while read -r lib; do copy_in "$lib"; done < <(ldd "$b" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }')
done
mkdir -p "$r"/{etc,root,proc,sys,dev,run,var/tmp,tmp}; chmod 1777 "$r/tmp" "$r/var/tmp"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$r/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$r/etc/group"
printf 'passwd: files\ngroup: files\nhosts: files dns\nservices: files\n' >"$r/etc/nsswitch.conf"
tar -C "$r" --numeric-owner --owner=0 --group=0 -c . | docker import --change 'CMD ["/bin/sleep","infinity"]' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - "$image" >/dev/null
docker run --rm --network none "$image" sh -c 'redis-server --version; sockperf --version | head -1; iperf3 --version | head -1'
