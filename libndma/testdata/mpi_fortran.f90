! mpi_fortran: an ordinary Fortran MPI program for the NDMA interposition
! library's test: Allreduce of REAL, DOUBLE PRECISION and INTEGER (also in
! place), Reduce, Bcast and Barrier on MPI_COMM_WORLD, each result checked
! exactly. Prints "ok rank N" on every rank when all checks pass.
program mpi_fortran
  use mpi
  implicit none
  integer, parameter :: n = 1001
  integer :: ierr, rank, nranks, i, bad, allbad
  real :: r(n), rs(n)
  double precision :: d(n), ds(n)
  integer :: k(n), ks(n)
  character(len=64) :: msg

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  bad = 0
  do i = 1, n
    r(i) = real(rank + i)
    d(i) = dble(rank) * 2 - i
    k(i) = rank * 3 + mod(i, 7)
  end do
  call MPI_Allreduce(r, rs, n, MPI_REAL, MPI_SUM, MPI_COMM_WORLD, ierr)
  call MPI_Allreduce(d, ds, n, MPI_DOUBLE_PRECISION, MPI_MAX, MPI_COMM_WORLD, ierr)
  call MPI_Allreduce(k, ks, n, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  do i = 1, n
    if (rs(i) /= real(nranks * i + nranks * (nranks - 1) / 2)) bad = bad + 1
    if (ds(i) /= dble(nranks - 1) * 2 - i) bad = bad + 1
    if (ks(i) /= 3 * nranks * (nranks - 1) / 2 + nranks * mod(i, 7)) bad = bad + 1
  end do
  ks = k
  call MPI_Allreduce(MPI_IN_PLACE, ks, n, MPI_INTEGER, MPI_MIN, MPI_COMM_WORLD, ierr)
  do i = 1, n
    if (ks(i) /= mod(i, 7)) bad = bad + 1
  end do
  call MPI_Reduce(r, rs, n, MPI_REAL, MPI_MAX, nranks - 1, MPI_COMM_WORLD, ierr)
  if (rank == nranks - 1) then
    do i = 1, n
      if (rs(i) /= real(nranks - 1 + i)) bad = bad + 1
    end do
  end if
  msg = ''
  if (rank == 0) msg = 'from rank 0'
  call MPI_Bcast(msg, len(msg), MPI_CHARACTER, 0, MPI_COMM_WORLD, ierr)
  if (msg /= 'from rank 0') bad = bad + 1
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  if (bad /= 0) print *, 'rank', rank, ':', bad, 'wrong results'
  call PMPI_Allreduce(bad, allbad, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (allbad == 0) write (*, '(a, i0)') 'ok rank ', rank
  call MPI_Finalize(ierr)
end program
