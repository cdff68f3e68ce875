/* Open MPI's MPI_Barrier, timed as rmr-bench barrier times rmr's: rank 0
 * times every barrier (after a tenth as warm-up) and prints the median in
 * microseconds as one JSON line. Built with mpicc by scripts/bench-barrier.sh.
 *
 *   mpirun -np N mpi_barrier ITERS LABEL
 */
#include "bench.h"
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int iters = argc > 1 ? atoi(argv[1]) : 2000, warm = iters / 10;
    const char *label = argc > 2 ? argv[2] : "mpi";
    double *t = malloc(sizeof(double) * iters);
    for (int i = 0; i < warm + iters; i++) {
        double s = MPI_Wtime();
        MPI_Barrier(MPI_COMM_WORLD);
        double e = MPI_Wtime();
        if (i >= warm) t[i - warm] = (e - s) * 1e6;
    }
    if (rank == 0) {
        qsort(t, iters, sizeof *t, cmp);
        printf("{\"test\":\"barrier\",\"backend\":\"mpi\",\"algo\":\"%s\",\"procs\":%d,\"nodes\":1,"
               "\"shm\":\"mpi\",\"iters\":%d,\"lat_us\":%.3f}\n",
               label, size, iters, t[iters / 2]);
    }
    MPI_Finalize();
    return 0;
}
