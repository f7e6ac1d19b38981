/* floor: the least work a live capture to pcapng can do on Linux, as a yardstick for
 * bench/live.py (tool "floor"). Not part of tapflow.
 *
 *     floor IFACE OUT.pcapng [SNAPLEN]
 *
 * One thread: a TPACKET_V3 ring (64 blocks of 1 MiB, 10 ms retire timeout) behind a
 * `ret #snaplen` socket filter (the kernel copies only what is kept), each block walked
 * with the lines ahead prefetched, every packet encoded as an Enhanced Packet Block (snaplen
 * bytes, an epb_flags option with the direction, as tapflow writes them) into a 1 MiB buffer
 * that goes to the file by O_DIRECT, then the file's tail through the page cache. Nothing else:
 * no filter, no statistics, no per-packet checks beyond the ring's own lengths, no rotation,
 * no interface statistics blocks, no drop positions, no sync. On SIGINT/SIGTERM it prints
 * "floor: N packets, D dropped by kernel" and exits.
 *
 * Build: cc -O2 -o floor bench/floor.c (bench/live.py does this itself).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_ether.h>
#include <linux/filter.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#define BLOCK (1u << 20)
#define BLOCKS 64u
#define CHUNK (1u << 20)
#define AHEAD 2048

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig; stop = 1; }

static void die(const char *what) { perror(what); exit(1); }

static uint8_t *put32(uint8_t *o, uint32_t v) { memcpy(o, &v, 4); return o + 4; }

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: floor IFACE OUT.pcapng [SNAPLEN]\n"); return 2; }
    uint32_t snaplen = argc > 3 ? (uint32_t)atoi(argv[3]) : 64;
    if (snaplen == 0 || snaplen > 65535) { fprintf(stderr, "floor: snaplen 1..65535\n"); return 2; }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);

    /* Protocol 0: no packet reaches the socket before the ring and bind are in place. */
    int fd = socket(AF_PACKET, SOCK_RAW, 0);
    if (fd < 0) die("socket");
    int v3 = TPACKET_V3;
    if (setsockopt(fd, SOL_PACKET, PACKET_VERSION, &v3, sizeof v3)) die("PACKET_VERSION");
    struct tpacket_req3 req = {
        .tp_block_size = BLOCK, .tp_block_nr = BLOCKS, .tp_frame_size = 2048,
        .tp_frame_nr = BLOCK / 2048 * BLOCKS, .tp_retire_blk_tov = 10,
    };
    if (setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof req)) die("PACKET_RX_RING");
    uint8_t *ring = mmap(NULL, (size_t)BLOCK * BLOCKS, PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_LOCKED, fd, 0);
    if (ring == MAP_FAILED) die("mmap");
    /* "ret #snaplen": the kernel copies only the bytes kept into the ring, as tapflow asks. */
    struct sock_filter ret = BPF_STMT(BPF_RET | BPF_K, snaplen);
    struct sock_fprog prog = { .len = 1, .filter = &ret };
    if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog)) die("SO_ATTACH_FILTER");
    struct sockaddr_ll ll = { .sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL),
                              .sll_ifindex = (int)if_nametoindex(argv[1]) };
    if (!ll.sll_ifindex) die(argv[1]);
    if (bind(fd, (struct sockaddr *)&ll, sizeof ll)) die("bind");

    int out = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
    if (out < 0 && errno == EINVAL) /* tmpfs and the like: through the cache */
        out = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0) die(argv[2]);
    /* Room for a whole block of packets past the chunk (an EPB is never longer than its
     * ring slot): the buffer is written out between blocks. */
    uint8_t *buf = aligned_alloc(4096, CHUNK + BLOCK);
    if (!buf) die("buffer");
    size_t len = 0;
    /* Section Header Block, then an Interface Description Block: Ethernet, snaplen,
     * if_tsresol = 9 (ns). */
    uint8_t *o = buf;
    o = put32(o, 0x0A0D0D0A); o = put32(o, 28); o = put32(o, 0x1A2B3C4D);
    o = put32(o, 1); o = put32(o, 0xFFFFFFFF); o = put32(o, 0xFFFFFFFF); o = put32(o, 28);
    o = put32(o, 1); o = put32(o, 32); o = put32(o, 1); o = put32(o, snaplen);
    o = put32(o, 9 | (1u << 16)); o = put32(o, 9); o = put32(o, 0); o = put32(o, 32);
    len = (size_t)(o - buf);

    struct pollfd pfd = { .fd = fd, .events = POLLIN };
    uint64_t packets = 0;
    unsigned b = 0;
    while (!stop) {
        struct tpacket_block_desc *bd = (void *)(ring + (size_t)b * BLOCK);
        if (!(__atomic_load_n(&bd->hdr.bh1.block_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER)) {
            poll(&pfd, 1, 100);
            continue;
        }
        uint8_t *h8 = (uint8_t *)bd + bd->hdr.bh1.offset_to_first_pkt;
        uint8_t *end = (uint8_t *)bd + bd->hdr.bh1.blk_len;
        uint8_t *ahead = h8;
        for (unsigned i = bd->hdr.bh1.num_pkts; i > 0; i--) {
            uint8_t *want = h8 + AHEAD < end ? h8 + AHEAD : end;
            for (; ahead < want; ahead += 64) __builtin_prefetch(ahead);
            struct tpacket3_hdr *h = (void *)h8;
            uint32_t cap = h->tp_snaplen < snaplen ? h->tp_snaplen : snaplen;
            uint32_t padded = (cap + 3) & ~3u;
            uint32_t total = 28 + padded + 12 + 4;
            uint64_t ts = (uint64_t)h->tp_sec * 1000000000ull + h->tp_nsec;
            /* sockaddr_ll follows the header (TPACKET_ALIGN'd); its sll_pkttype is the
             * direction. */
            const struct sockaddr_ll *from =
                (const void *)(h8 + TPACKET_ALIGN(sizeof(struct tpacket3_hdr)));
            uint32_t dir = from->sll_pkttype == PACKET_OUTGOING ? 2 : 1;
            o = buf + len;
            uint32_t head[7] = { 6, total, 0, (uint32_t)(ts >> 32), (uint32_t)ts, cap, h->tp_len };
            memcpy(o, head, 28);
            memcpy(o + 28, h8 + h->tp_mac, cap);
            memset(o + 28 + cap, 0, padded - cap);
            uint32_t tail[4] = { 2 | (4u << 16), dir, 0, total };
            memcpy(o + 28 + padded, tail, 16);
            len += total;
            packets++;
            h8 += h->tp_next_offset;
        }
        __atomic_store_n(&bd->hdr.bh1.block_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
        b = (b + 1) % BLOCKS;
        if (len >= CHUNK) {
            size_t aligned = len & ~(size_t)4095;
            if (write(out, buf, aligned) != (ssize_t)aligned) die("write");
            memmove(buf, buf + aligned, len - aligned);
            len -= aligned;
        }
    }
    /* The tail: without O_DIRECT (it is not a whole block). */
    if (fcntl(out, F_SETFL, fcntl(out, F_GETFL) & ~O_DIRECT)) die("fcntl");
    if (len && write(out, buf, len) != (ssize_t)len) die("write");
    close(out);
    struct tpacket_stats_v3 st;
    socklen_t sl = sizeof st;
    if (getsockopt(fd, SOL_PACKET, PACKET_STATISTICS, &st, &sl)) die("PACKET_STATISTICS");
    fprintf(stderr, "floor: %llu packets, %u dropped by kernel\n", (unsigned long long)packets,
            st.tp_drops);
    return 0;
}
