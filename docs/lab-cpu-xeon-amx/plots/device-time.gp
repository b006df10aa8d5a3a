# Made by dlperf lab. Rerun with: gnuplot /tmp/ab/lab2/plots/device-time.gp
set terminal pngcairo size 900,560 enhanced font 'Sans,10'
set output '/tmp/ab/lab2/plots/device-time.png'
set title 'Seconds per epoch by device'
set ylabel 'seconds per epoch'
set grid ytics
set key top left
set logscale y
set yrange [*:*]
set style fill solid
set boxwidth 0.6
set xtics nomirror rotate by 30 right
set offsets 0.5,0.5,0,0
plot '/tmp/ab/lab2/plots/device-time-0.dat' using 0:2:xtic(1) with boxes fs solid 0.6 lc rgb '#4477aa' notitle, '/tmp/ab/lab2/plots/device-time-0.dat' using 0:2:(sprintf('%.3g', $2)) with labels offset 0,0.8 notitle
