/* Open MPI between two ranks of one node (the vader/sm BTL), as the shm
 * backend's baseline: an 8 B ping-pong (half round trip, median of blocks)
 * and a windowed bandwidth test in the style of osu_bw (64 messages of the
 * size in flight, then a 4-byte acknowledgement), per size.
 *   mpirun -np 2 --bind-to core ./mpi_pingpong_bw lat 8 ITERS
 *   mpirun -np 2 --bind-to core ./mpi_pingpong_bw bw SIZE ITERS
 * Prints one line: "lat_us X" or "gbit_s X" (10^9 bit/s). */
#include "bench.h"
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc < 4) {
        if (rank == 0) fprintf(stderr, "usage: lat|bw SIZE ITERS\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const int bw = strcmp(argv[1], "bw") == 0;
    const size_t size = strtoull(argv[2], NULL, 10);
    const long iters = strtol(argv[3], NULL, 10);
    char *buf = malloc(size * (bw ? WINDOW : 1) + 64);
    memset(buf, rank + 1, size * (bw ? WINDOW : 1) + 64);
    int ack = 0;
    MPI_Request req[WINDOW];
    if (!bw) {
        /* Blocks of 100 round trips; the median block's half round trip. */
        const long blocks = iters / 100 > 0 ? iters / 100 : 1;
        double *t = malloc(sizeof(double) * blocks);
        for (long w = 0; w < 1000; w++) {
            if (rank == 0) {
                MPI_Send(buf, size, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
                MPI_Recv(buf, size, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(buf, size, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(buf, size, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
            }
        }
        for (long b = 0; b < blocks; b++) {
            double t0 = MPI_Wtime();
            for (int i = 0; i < 100; i++) {
                if (rank == 0) {
                    MPI_Send(buf, size, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
                    MPI_Recv(buf, size, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    MPI_Recv(buf, size, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(buf, size, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
                }
            }
            t[b] = (MPI_Wtime() - t0) / 100 / 2 * 1e6;
        }
        qsort(t, blocks, sizeof(double), cmp);
        if (rank == 0) printf("lat_us %.3f\n", t[blocks / 2]);
    } else {
        double t0 = 0;
        for (long it = -iters / 10 - 1; it < iters; it++) {
            if (it == 0) {
                MPI_Barrier(MPI_COMM_WORLD);
                t0 = MPI_Wtime();
            }
            if (rank == 0) {
                for (int w = 0; w < WINDOW; w++)
                    MPI_Isend(buf + w * size, size, MPI_CHAR, 1, 2, MPI_COMM_WORLD, &req[w]);
                MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
                MPI_Recv(&ack, 1, MPI_INT, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                for (int w = 0; w < WINDOW; w++)
                    MPI_Irecv(buf + w * size, size, MPI_CHAR, 0, 2, MPI_COMM_WORLD, &req[w]);
                MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
                MPI_Send(&ack, 1, MPI_INT, 0, 3, MPI_COMM_WORLD);
            }
        }
        double secs = MPI_Wtime() - t0;
        if (rank == 0) printf("gbit_s %.3f\n", (double)size * WINDOW * iters * 8 / secs / 1e9);
    }
    MPI_Finalize();
    return 0;
}
