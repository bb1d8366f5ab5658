# shellcheck shell=bash
# Builds and caches the guest: a Debian bookworm rootfs with Linux rxe, rdma-core
# and perftest, an uncompressed vmlinux for a fast PVH boot, a small initrd and
# an ext4 image. Sourced by interop/run; reads CACHE and HERE, sets IMAGE,
# VMLINUX, INITRD and GUEST_VERSIONS.
#
# Two cache levels under $CACHE, both outside the repository:
#   rootfs-KEY1/   the trimmed rootfs, vmlinux, initrd.img, versions.txt
#                  (KEY1 = hash of the package list and this file)
#   image-KEY2.img the ext4 image (KEY2 = KEY1 and guest-init.sh)
# so editing the guest init script costs a mkfs (seconds), not a debootstrap.

# GEN (interop/run's XROCE_INTEROP_GEN) chooses the Debian release: bookworm
# (Linux 6.1, rdma-core 44, perftest 4.5) or trixie (Linux 6.12, rdma-core
# 56, perftest 25.01). Each has its own cache entries.
GUEST_SUITE=${GEN:-bookworm}
GUEST_PACKAGES=linux-image-amd64,initramfs-tools,rdma-core,ibverbs-utils,ibverbs-providers,perftest,rdmacm-utils,iproute2,tcpdump,iputils-ping,ethtool,kmod,procps,netbase,busybox
GUEST_IMAGE_SIZE=1G

# mirror prints the host's Debian mirror from its apt configuration.
mirror() {
	local uri=""
	if compgen -G '/etc/apt/sources.list.d/*.sources' >/dev/null; then
		uri=$(awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i !~ /security/) { print $i; exit } }' /etc/apt/sources.list.d/*.sources)
	fi
	if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
		uri=$(awk '$1 == "deb" && $0 !~ /security/ { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }' /etc/apt/sources.list)
	fi
	[ -n "$uri" ] || { echo "interop: no Debian mirror in the host's apt configuration" >&2; return 1; }
	echo "$uri"
}

hash_of() { cat "$@" | sha256sum | cut -c1-16; }

# build_rootfs DIR: debootstrap, a fast-boot kernel and initrd, trimming.
build_rootfs() {
	local dir=$1 root=$1/rootfs kver m
	m=$(mirror)
	mkdir -p "$CACHE/debs"
	echo "interop: debootstrap $GUEST_SUITE (minbase + $(tr ',' '\n' <<<"$GUEST_PACKAGES" | wc -l) packages)" >&2
	nice -n 19 debootstrap --variant=minbase --include="$GUEST_PACKAGES" \
		--cache-dir="$CACHE/debs" "$GUEST_SUITE" "$root" "$m" >"$dir/debootstrap.log" 2>&1 ||
		{ tail -20 "$dir/debootstrap.log" >&2; return 1; }
	kver=$(ls "$root/lib/modules")

	# The uncompressed ELF vmlinux boots through PVH in half the time of the
	# bzImage under TCG: it is the xz stream after the FD 37 7A 58 5A 00 magic
	# (a kernel compressed otherwise is booted as it is).
	python3 - "$root/boot/vmlinuz-$kver" "$dir/vmlinux" <<'EOF'
import lzma, sys
data = open(sys.argv[1], "rb").read()
off = data.find(b"\xfd7zXZ\x00")
out = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(data[off:]) if off >= 0 else b""
if out[:4] != b"\x7fELF":
    # Not an xz-compressed kernel: QEMU boots the bzImage itself.
    out = data
open(sys.argv[2], "wb").write(out)
EOF

	# A small initrd: only what it takes to mount the virtio ext4 root.
	rm -rf "$root/tmp/ird"
	cp -a "$root/etc/initramfs-tools" "$root/tmp/ird"
	sed -i -e 's/^MODULES=.*/MODULES=list/' -e 's/^#\?COMPRESS=.*/COMPRESS=gzip/' "$root/tmp/ird/initramfs.conf"
	printf '%s\n' virtio_pci virtio_blk ext4 >"$root/tmp/ird/modules"
	# BUILD_PROC tells interop/run's exit trap to unmount it if we are
	# stopped meanwhile.
	BUILD_PROC=$root/proc
	mount -t proc proc "$root/proc"
	nice -n 19 chroot "$root" mkinitramfs -d /tmp/ird -o /tmp/initrd.img "$kver" >"$dir/mkinitramfs.log" 2>&1
	local rc=$?
	umount "$root/proc"
	BUILD_PROC=""
	[ $rc -eq 0 ] || { tail -20 "$dir/mkinitramfs.log" >&2; return 1; }
	mv "$root/tmp/initrd.img" "$dir/initrd.img"
	rm -rf "$root/tmp/ird"

	# Trim: the boot files live beside the image, and the guest needs no docs,
	# locales, apt state, or drivers for sound, graphics, media, radios, USB.
	rm -rf "$root"/boot/* "$root"/usr/share/{doc,man,info,locale,lintian} \
		"$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old
	local k="$root/lib/modules/$kver/kernel"
	rm -rf "$k"/sound "$k"/drivers/{gpu,media,usb,bluetooth,staging,isdn,hid,input,iio,mmc,nfc,hwmon,video,watchdog,thunderbolt} \
		"$k"/drivers/net/{wireless,ethernet,can,usb} "$k"/drivers/infiniband/hw \
		"$k"/net/{wireless,bluetooth,mac80211} "$root"/lib/firmware
	chroot "$root" depmod "$kver"

	{
		echo "kernel $kver ($(chroot "$root" dpkg-query -W -f '${Version}' "linux-image-$kver"))"
		echo "rdma-core $(chroot "$root" dpkg-query -W -f '${Version}' rdma-core)"
		echo "perftest $(chroot "$root" dpkg-query -W -f '${Version}' perftest)"
	} >"$dir/versions.txt"
}

# ensure_image sets IMAGE, VMLINUX, INITRD and GUEST_VERSIONS, building what
# the cache lacks.
ensure_image() {
	local key1 key2 dir tmp t0
	key1=$(hash_of <(echo "$GUEST_SUITE $GUEST_PACKAGES") "$HERE/image.sh")
	dir="$CACHE/rootfs-$GUEST_SUITE-$key1"
	if [ ! -f "$dir/versions.txt" ]; then
		t0=$(date +%s)
		tmp="$CACHE/.rootfs-$GUEST_SUITE-$key1.$$"
		rm -rf "$tmp"
		mkdir -p "$tmp"
		BUILD_TMP=$tmp # removed by interop/run's exit trap if we are stopped
		if ! build_rootfs "$tmp"; then
			mountpoint -q "$tmp/rootfs/proc" && umount "$tmp/rootfs/proc"
			rm -rf "$tmp"
			BUILD_TMP=""
			return 1
		fi
		rm -rf "$dir"
		mv "$tmp" "$dir"
		BUILD_TMP=""
		# Rootfs trees of this release's other package lists or build
		# scripts are stale (and those of the names before releases).
		find "$CACHE" -maxdepth 1 \( -name "rootfs-$GUEST_SUITE-*" -o -regex '.*/rootfs-[0-9a-f]+' \) \
			! -name "rootfs-$GUEST_SUITE-$key1" -exec rm -rf {} +
		echo "interop: rootfs built in $(($(date +%s) - t0)) s: $dir" >&2
		echo "$(($(date +%s) - t0))" >"$dir/build-seconds"
	fi
	key2=$(hash_of <(echo "$key1") "$HERE/guest-init.sh")
	IMAGE="$CACHE/image-$GUEST_SUITE-$key2.img"
	if [ ! -f "$IMAGE" ]; then
		t0=$(date +%s)
		install -m 0755 "$HERE/guest-init.sh" "$dir/rootfs/guest-init.sh"
		rm -f "$IMAGE.tmp"
		nice -n 19 mkfs.ext4 -q -F -E root_owner=0:0 -d "$dir/rootfs" "$IMAGE.tmp" "$GUEST_IMAGE_SIZE"
		mv "$IMAGE.tmp" "$IMAGE"
		# Older images of this release are stale (and those named before
		# releases).
		find "$CACHE" -maxdepth 1 \( -name "image-$GUEST_SUITE-*.img" -o -regex '.*/image-[0-9a-f]+\.img' \) \
			! -name "image-$GUEST_SUITE-$key2.img" -delete
		echo "interop: image built in $(($(date +%s) - t0)) s: $IMAGE" >&2
	fi
	VMLINUX="$dir/vmlinux"
	INITRD="$dir/initrd.img"
	GUEST_VERSIONS=$(paste -sd';' "$dir/versions.txt" | sed 's/;/; /g')
}
